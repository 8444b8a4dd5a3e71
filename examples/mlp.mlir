// A small MLP served by examples/serve.rs: a batch of 4 rows of 16 features, a 32-wide ReLU
// layer, 8 outputs. The weights are parameters, uploaded once per device. Both dots ask for
// full f32 (`precision = HIGHEST`): GPU plugins otherwise run f32 dots as TF32 (1.3e-3 relative
// error against an f64 reference, measured on an H200), and the answers are checked at 1e-4.
module @mlp {
  func.func public @main(%x: tensor<4x16xf32>, %w1: tensor<16x32xf32>, %b1: tensor<32xf32>,
                         %w2: tensor<32x8xf32>, %b2: tensor<8xf32>) -> tensor<4x8xf32> {
    %h = stablehlo.dot_general %x, %w1, contracting_dims = [1] x [0], precision = [HIGHEST, HIGHEST] : (tensor<4x16xf32>, tensor<16x32xf32>) -> tensor<4x32xf32>
    %bias1 = stablehlo.broadcast_in_dim %b1, dims = [1] : (tensor<32xf32>) -> tensor<4x32xf32>
    %h1 = stablehlo.add %h, %bias1 : tensor<4x32xf32>
    %zero = stablehlo.constant dense<0.0> : tensor<4x32xf32>
    %relu = stablehlo.maximum %h1, %zero : tensor<4x32xf32>
    %o = stablehlo.dot_general %relu, %w2, contracting_dims = [1] x [0], precision = [HIGHEST, HIGHEST] : (tensor<4x32xf32>, tensor<32x8xf32>) -> tensor<4x8xf32>
    %bias2 = stablehlo.broadcast_in_dim %b2, dims = [1] : (tensor<8xf32>) -> tensor<4x8xf32>
    %y = stablehlo.add %o, %bias2 : tensor<4x8xf32>
    return %y : tensor<4x8xf32>
  }
}
