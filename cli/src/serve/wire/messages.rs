//! The KServe v2 gRPC messages the server speaks, written with prost's derive (field numbers
//! as in the protocol's grpc_service.proto, so the build needs no protoc). Plain data: the
//! protocol bench includes this file to be a client.

use std::collections::HashMap;

#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Flag {
    #[prost(bool, tag = "1")]
    pub value: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelRef {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ServerMetadataResponse {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub version: String,
    #[prost(string, repeated, tag = "3")]
    pub extensions: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub datatype: String,
    #[prost(int64, repeated, tag = "3")]
    pub shape: Vec<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelMetadataResponse {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, repeated, tag = "2")]
    pub versions: Vec<String>,
    #[prost(string, tag = "3")]
    pub platform: String,
    #[prost(message, repeated, tag = "4")]
    pub inputs: Vec<TensorMetadata>,
    #[prost(message, repeated, tag = "5")]
    pub outputs: Vec<TensorMetadata>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum ParameterChoice {
    #[prost(bool, tag = "1")]
    Bool(bool),
    #[prost(int64, tag = "2")]
    Int64(i64),
    #[prost(string, tag = "3")]
    String(String),
    #[prost(double, tag = "4")]
    Double(f64),
    #[prost(uint64, tag = "5")]
    Uint64(u64),
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct InferParameter {
    #[prost(oneof = "ParameterChoice", tags = "1, 2, 3, 4, 5")]
    pub choice: Option<ParameterChoice>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct InferTensorContents {
    #[prost(bool, repeated, tag = "1")]
    pub bool_contents: Vec<bool>,
    #[prost(int32, repeated, tag = "2")]
    pub int_contents: Vec<i32>,
    #[prost(int64, repeated, tag = "3")]
    pub int64_contents: Vec<i64>,
    #[prost(uint32, repeated, tag = "4")]
    pub uint_contents: Vec<u32>,
    #[prost(uint64, repeated, tag = "5")]
    pub uint64_contents: Vec<u64>,
    #[prost(float, repeated, tag = "6")]
    pub fp32_contents: Vec<f32>,
    #[prost(double, repeated, tag = "7")]
    pub fp64_contents: Vec<f64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct InferInputTensor {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub datatype: String,
    #[prost(int64, repeated, tag = "3")]
    pub shape: Vec<i64>,
    #[prost(map = "string, message", tag = "4")]
    pub parameters: HashMap<String, InferParameter>,
    #[prost(message, optional, tag = "5")]
    pub contents: Option<InferTensorContents>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct InferRequestedOutputTensor {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(map = "string, message", tag = "2")]
    pub parameters: HashMap<String, InferParameter>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelInferRequest {
    #[prost(string, tag = "1")]
    pub model_name: String,
    #[prost(string, tag = "2")]
    pub model_version: String,
    #[prost(string, tag = "3")]
    pub id: String,
    #[prost(map = "string, message", tag = "4")]
    pub parameters: HashMap<String, InferParameter>,
    #[prost(message, repeated, tag = "5")]
    pub inputs: Vec<InferInputTensor>,
    #[prost(message, repeated, tag = "6")]
    pub outputs: Vec<InferRequestedOutputTensor>,
    #[prost(bytes = "vec", repeated, tag = "7")]
    pub raw_input_contents: Vec<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct InferOutputTensor {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub datatype: String,
    #[prost(int64, repeated, tag = "3")]
    pub shape: Vec<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelInferResponse {
    #[prost(string, tag = "1")]
    pub model_name: String,
    #[prost(string, tag = "2")]
    pub model_version: String,
    #[prost(string, tag = "3")]
    pub id: String,
    #[prost(map = "string, message", tag = "4")]
    pub parameters: HashMap<String, InferParameter>,
    #[prost(message, repeated, tag = "5")]
    pub outputs: Vec<InferOutputTensor>,
    #[prost(bytes = "vec", repeated, tag = "6")]
    pub raw_output_contents: Vec<Vec<u8>>,
}

/// One answer on a `ModelStreamInfer` stream: a response, or the error of one request.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelStreamInferResponse {
    #[prost(string, tag = "1")]
    pub error_message: String,
    #[prost(message, optional, tag = "2")]
    pub infer_response: Option<ModelInferResponse>,
}

// Triton's model configuration (model_config.proto), the fields this server fills.

/// Triton's `DataType` numbers.
pub mod data_type {
    pub const NAMES: &[(&str, i32)] = &[
        ("TYPE_BOOL", 1),
        ("TYPE_UINT8", 2),
        ("TYPE_UINT16", 3),
        ("TYPE_UINT32", 4),
        ("TYPE_UINT64", 5),
        ("TYPE_INT8", 6),
        ("TYPE_INT16", 7),
        ("TYPE_INT32", 8),
        ("TYPE_INT64", 9),
        ("TYPE_FP16", 10),
        ("TYPE_FP32", 11),
        ("TYPE_FP64", 12),
        ("TYPE_BF16", 14),
    ];
}

/// `ModelInstanceGroup.Kind`.
pub const KIND_GPU: i32 = 1;
pub const KIND_CPU: i32 = 2;

#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelInput {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(int32, tag = "2")]
    pub data_type: i32,
    #[prost(int32, tag = "3")]
    pub format: i32,
    #[prost(int64, repeated, tag = "4")]
    pub dims: Vec<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelOutput {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(int32, tag = "2")]
    pub data_type: i32,
    #[prost(int64, repeated, tag = "3")]
    pub dims: Vec<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelQueuePolicy {
    /// 0: REJECT.
    #[prost(int32, tag = "1")]
    pub timeout_action: i32,
    #[prost(uint64, tag = "2")]
    pub default_timeout_microseconds: u64,
    #[prost(bool, tag = "3")]
    pub allow_timeout_override: bool,
    #[prost(uint32, tag = "4")]
    pub max_queue_size: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelDynamicBatching {
    #[prost(int32, repeated, tag = "1")]
    pub preferred_batch_size: Vec<i32>,
    #[prost(uint64, tag = "2")]
    pub max_queue_delay_microseconds: u64,
    #[prost(bool, tag = "3")]
    pub preserve_ordering: bool,
    #[prost(uint64, tag = "4")]
    pub priority_levels: u64,
    #[prost(uint64, tag = "5")]
    pub default_priority_level: u64,
    #[prost(message, optional, tag = "6")]
    pub default_queue_policy: Option<ModelQueuePolicy>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelInstanceGroup {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(int32, tag = "2")]
    pub count: i32,
    #[prost(int32, repeated, tag = "3")]
    pub gpus: Vec<i32>,
    #[prost(int32, tag = "4")]
    pub kind: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelConfig {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub platform: String,
    #[prost(int32, tag = "4")]
    pub max_batch_size: i32,
    #[prost(message, repeated, tag = "5")]
    pub input: Vec<ModelInput>,
    #[prost(message, repeated, tag = "6")]
    pub output: Vec<ModelOutput>,
    #[prost(message, repeated, tag = "7")]
    pub instance_group: Vec<ModelInstanceGroup>,
    #[prost(message, optional, tag = "11")]
    pub dynamic_batching: Option<ModelDynamicBatching>,
    #[prost(string, tag = "17")]
    pub backend: String,
    #[prost(message, optional, tag = "19")]
    pub model_transaction_policy: Option<ModelTransactionPolicy>,
}

/// Whether a model answers a request with any number of responses (decoupled), as a
/// generation model does: one a token.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct ModelTransactionPolicy {
    #[prost(bool, tag = "1")]
    pub decoupled: bool,
}

// Triton's model repository index (grpc_service.proto's RepositoryIndex).

#[derive(Clone, PartialEq, prost::Message)]
pub struct RepositoryIndexRequest {
    #[prost(string, tag = "1")]
    pub repository_name: String,
    #[prost(bool, tag = "2")]
    pub ready: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelIndex {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub version: String,
    #[prost(string, tag = "3")]
    pub state: String,
    #[prost(string, tag = "4")]
    pub reason: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RepositoryIndexResponse {
    #[prost(message, repeated, tag = "1")]
    pub models: Vec<ModelIndex>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelConfigResponse {
    #[prost(message, optional, tag = "1")]
    pub config: Option<ModelConfig>,
}

// Triton's model statistics (grpc_service.proto).

#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct StatisticDuration {
    #[prost(uint64, tag = "1")]
    pub count: u64,
    #[prost(uint64, tag = "2")]
    pub ns: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct InferStatistics {
    #[prost(message, optional, tag = "1")]
    pub success: Option<StatisticDuration>,
    #[prost(message, optional, tag = "2")]
    pub fail: Option<StatisticDuration>,
    #[prost(message, optional, tag = "3")]
    pub queue: Option<StatisticDuration>,
    #[prost(message, optional, tag = "4")]
    pub compute_input: Option<StatisticDuration>,
    #[prost(message, optional, tag = "5")]
    pub compute_infer: Option<StatisticDuration>,
    #[prost(message, optional, tag = "6")]
    pub compute_output: Option<StatisticDuration>,
    #[prost(message, optional, tag = "7")]
    pub cache_hit: Option<StatisticDuration>,
    #[prost(message, optional, tag = "8")]
    pub cache_miss: Option<StatisticDuration>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct InferBatchStatistics {
    #[prost(uint64, tag = "1")]
    pub batch_size: u64,
    #[prost(message, optional, tag = "2")]
    pub compute_input: Option<StatisticDuration>,
    #[prost(message, optional, tag = "3")]
    pub compute_infer: Option<StatisticDuration>,
    #[prost(message, optional, tag = "4")]
    pub compute_output: Option<StatisticDuration>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelStatistics {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub version: String,
    #[prost(uint64, tag = "3")]
    pub last_inference: u64,
    #[prost(uint64, tag = "4")]
    pub inference_count: u64,
    #[prost(uint64, tag = "5")]
    pub execution_count: u64,
    #[prost(message, optional, tag = "6")]
    pub inference_stats: Option<InferStatistics>,
    #[prost(message, repeated, tag = "7")]
    pub batch_stats: Vec<InferBatchStatistics>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelStatisticsResponse {
    #[prost(message, repeated, tag = "1")]
    pub model_stats: Vec<ModelStatistics>,
}
