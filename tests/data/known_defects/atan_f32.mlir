module @atan_f32 {
  func.func public @main(%arg0: tensor<400xf32>) -> tensor<400xf32> {
    %0 = chlo.atan %arg0 : tensor<400xf32> -> tensor<400xf32>
    return %0 : tensor<400xf32>
  }
}
