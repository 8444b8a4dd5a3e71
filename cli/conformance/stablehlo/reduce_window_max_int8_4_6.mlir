// RUN: stablehlo-opt -inline %s | stablehlo-translate --interpret
// RUN: stablehlo-translate --serialize --target=current %s | stablehlo-translate --deserialize | stablehlo-opt > %t.0
// RUN: stablehlo-opt %s > %t.1
// RUN: diff %t.0 %t.1

module @jit_main attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main() -> (tensor<3x5xi8> {jax.result_info = "", mhlo.layout_mode = "default"}) {
    %0 = call @inputs() : () -> tensor<4x6xi8>
    %1 = call @expected() : () -> tensor<3x5xi8>
    %c = stablehlo.constant dense<1> : tensor<i8>
    %2 = "stablehlo.reduce_window"(%0, %c) <{window_dimensions = array<i64: 2, 2>}> ({
    ^bb0(%arg0: tensor<i8>, %arg1: tensor<i8>):
      %3 = stablehlo.maximum %arg0, %arg1 : tensor<i8>
      stablehlo.return %3 : tensor<i8>
    }) : (tensor<4x6xi8>, tensor<i8>) -> tensor<3x5xi8>
    stablehlo.custom_call @check.expect_eq(%2, %1) {has_side_effect = true} : (tensor<3x5xi8>, tensor<3x5xi8>) -> ()
    return %2 : tensor<3x5xi8>
  }
  func.func private @inputs() -> (tensor<4x6xi8> {mhlo.layout_mode = "default"}) {
    %c = stablehlo.constant dense<[[0, 1, -1, 0, 2, -4], [0, 1, -2, -2, 0, 0], [1, -2, 0, -1, -4, 1], [0, 0, 4, -1, 0, -1]]> : tensor<4x6xi8>
    return %c : tensor<4x6xi8>
  }
  func.func private @expected() -> (tensor<3x5xi8> {mhlo.layout_mode = "default"}) {
    %c = stablehlo.constant dense<[[1, 1, 1, 2, 2], [1, 1, 1, 1, 1], [1, 4, 4, 1, 1]]> : tensor<3x5xi8>
    return %c : tensor<3x5xi8>
  }
}
