// The one exception type of polyquant: bad input is reported with the parameter name and the
// allowed values, never by a crash or silent garbage.
#pragma once

#include <stdexcept>
#include <string>

#include "polyquant/export.h"

namespace polyquant {

enum class ErrorKind {
  kValue,  // a value is out of its domain (Python: ValueError)
  kType,   // an element type is not supported (Python: TypeError)
  kOverflow,  // Python arithmetic of the reference overflows (Python: OverflowError)
  kRuntime,   // the reference raises RuntimeError (AIMET's shape and grid checks)
};

class POLYQUANT_API Error : public std::invalid_argument {
 public:
  Error(ErrorKind kind, const std::string& message) : std::invalid_argument(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace polyquant
