module @atan_f64 {
  func.func public @main(%arg0: tensor<400xf64>) -> tensor<400xf64> {
    %0 = chlo.atan %arg0 : tensor<400xf64> -> tensor<400xf64>
    return %0 : tensor<400xf64>
  }
}
