// polyquant: bit-exact quantization operators of QONNX, QKeras, AIMET, Quark and ONNX on one core.
// This umbrella header is the whole public C++ API (every family's header); nothing in it depends
// on the CPU's ISA.
#pragma once

#include "polyquant/aimet.h"
#include "polyquant/aimet_analyzers.h"
#include "polyquant/aimet_quantizer.h"
#include "polyquant/error.h"
#include "polyquant/export.h"
#include "polyquant/onnx_qdq.h"
#include "polyquant/plan.h"
#include "polyquant/qkeras.h"
#include "polyquant/qonnx.h"
#include "polyquant/quark.h"
#include "polyquant/rounding.h"
#include "polyquant/runtime.h"
#include "polyquant/tensor.h"
