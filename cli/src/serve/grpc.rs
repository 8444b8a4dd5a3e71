//! KServe v2 over gRPC (tonic): the `inference.GRPCInferenceService` methods that match the
//! HTTP endpoints, routed by path as tonic's generated servers do (the messages are in
//! messages.rs).
// tonic's `Status` (176 bytes) is what every gRPC method returns: the protocol's error type.
#![allow(clippy::result_large_err)]

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::codegen::{BoxFuture, Service, http};
use tonic::{Request, Response, Status};

use super::kserve::{GivenInput, Models, RequestParams, ServeError, datatype_name};
use super::messages::*;

fn status(e: ServeError) -> Status {
    Status::new(e.grpc_code(), e.message())
}

/// A typed contents message as little-endian bytes.
fn contents_bytes(c: &InferTensorContents) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend(c.bool_contents.iter().map(|&v| v as u8));
    b.extend(c.int_contents.iter().flat_map(|v| v.to_le_bytes()));
    b.extend(c.int64_contents.iter().flat_map(|v| v.to_le_bytes()));
    b.extend(c.uint_contents.iter().flat_map(|v| v.to_le_bytes()));
    b.extend(c.uint64_contents.iter().flat_map(|v| v.to_le_bytes()));
    b.extend(c.fp32_contents.iter().flat_map(|v| v.to_le_bytes()));
    b.extend(c.fp64_contents.iter().flat_map(|v| v.to_le_bytes()));
    b
}

async fn model_infer(
    models: Arc<Models>,
    r: ModelInferRequest,
) -> Result<ModelInferResponse, Status> {
    let raw = r.raw_input_contents;
    if !raw.is_empty() && raw.len() != r.inputs.len() {
        return Err(status(ServeError::Invalid(format!(
            "{} raw input contents for {} inputs",
            raw.len(),
            r.inputs.len()
        ))));
    }
    let mut raw = raw.into_iter();
    let inputs = (r.inputs.into_iter())
        .map(|i| GivenInput {
            bytes: match raw.next() {
                Some(bytes) => bytes,
                None => i.contents.as_ref().map(contents_bytes).unwrap_or_default(),
            },
            name: i.name,
            datatype: i.datatype,
            shape: i.shape,
        })
        .collect();
    let params = RequestParams {
        priority: r
            .parameters
            .get("priority")
            .and_then(InferParameter::as_u64),
        timeout_us: r.parameters.get("timeout").and_then(InferParameter::as_u64),
    };
    let wanted: Vec<String> = r.outputs.into_iter().map(|o| o.name).collect();
    let answered = (models
        .infer("grpc", &r.model_name, inputs, params, &wanted)
        .await)
        .map_err(status)?;
    let mut response = ModelInferResponse {
        model_name: r.model_name,
        model_version: "1".into(),
        id: r.id,
        ..Default::default()
    };
    for a in answered {
        response.outputs.push(InferOutputTensor {
            name: a.spec.name,
            datatype: datatype_name(a.data.dtype).unwrap_or("").into(),
            shape: a.data.dims,
        });
        response.raw_output_contents.push(a.data.bytes);
    }
    Ok(response)
}

fn metadata(models: &Models, name: &str) -> Result<ModelMetadataResponse, Status> {
    let m = models.model(name).map_err(status)?;
    let specs = |specs: &[super::kserve::TensorSpec]| {
        (specs.iter())
            .map(|s| TensorMetadata {
                name: s.name.clone(),
                datatype: datatype_name(s.dtype).unwrap_or("").into(),
                shape: s.metadata_shape(),
            })
            .collect()
    };
    Ok(ModelMetadataResponse {
        name: m.name.clone(),
        versions: vec!["1".into()],
        platform: m.platform.into(),
        inputs: specs(&m.inputs),
        outputs: specs(&m.outputs),
    })
}

/// The service: one unary method per path.
#[derive(Clone)]
pub struct InferenceService {
    pub models: Arc<Models>,
}

impl tonic::server::NamedService for InferenceService {
    const NAME: &'static str = "inference.GRPCInferenceService";
}

/// A unary method as a tower service over its decoded request.
struct Unary<F>(F);

impl<Req, Resp, F, Fut> Service<Request<Req>> for Unary<F>
where
    F: FnMut(Req) -> Fut,
    Fut: Future<Output = Result<Resp, Status>> + Send + 'static,
{
    type Response = Response<Resp>;
    type Error = Status;
    type Future = BoxFuture<Response<Resp>, Status>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Req>) -> Self::Future {
        let answer = (self.0)(request.into_inner());
        Box::pin(async move { answer.await.map(Response::new) })
    }
}

/// Decodes the request with prost, runs `f`, encodes its answer.
fn unary<B, Req, Resp, F, Fut>(
    request: http::Request<B>,
    f: F,
) -> BoxFuture<http::Response<tonic::body::Body>, std::convert::Infallible>
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
    Req: prost::Message + Default + Send + 'static,
    Resp: prost::Message + Send + 'static,
    F: FnMut(Req) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Resp, Status>> + Send + 'static,
{
    Box::pin(async move {
        let codec = tonic::codec::ProstCodec::<Resp, Req>::default();
        Ok(tonic::server::Grpc::new(codec)
            .unary(Unary(f), request)
            .await)
    })
}

impl<B> Service<http::Request<B>> for InferenceService
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let m = self.models.clone();
        let method = req
            .uri()
            .path()
            .rsplit('/')
            .next()
            .unwrap_or("")
            .to_string();
        match method.as_str() {
            "ServerLive" => unary(req, |_: Empty| async { Ok(Flag { value: true }) }),
            "ServerReady" => unary(req, move |_: Empty| {
                let ready = m.is_ready();
                async move { Ok(Flag { value: ready }) }
            }),
            "ModelReady" => unary(req, move |r: ModelRef| {
                let ready = m.model(&r.name).map(|_| m.is_ready()).map_err(status);
                async move { ready.map(|value| Flag { value }) }
            }),
            "ServerMetadata" => unary(req, |_: Empty| async {
                Ok(ServerMetadataResponse {
                    name: "pjrt-actors".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    extensions: vec!["binary_tensor_data".into()],
                })
            }),
            "ModelMetadata" => unary(req, move |r: ModelRef| {
                let answer = metadata(&m, &r.name);
                async move { answer }
            }),
            "ModelInfer" => unary(req, move |r: ModelInferRequest| model_infer(m.clone(), r)),
            other => {
                let status = Status::unimplemented(format!("{other} is not served"));
                Box::pin(async move { Ok(status.into_http()) })
            }
        }
    }
}
