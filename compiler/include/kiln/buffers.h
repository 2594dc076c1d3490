// Host data of one run: dense arrays in their dtype's own width, the values
// of a func's params and its buffers (Bindings), a graph's tensors by name,
// and a buffer's shape under given params. What the interpreters, compiled
// kernels, graph passes and benchmarks all exchange; no interpreter in here.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/ir.h"

namespace kiln {

// The largest host buffer kiln makes for a run (random inputs, outputs,
// temporaries of the interpreters): 4 GiB.
inline constexpr uint64_t kMaxHostBufferBytes = uint64_t{4} << 30;

// What HostBuffer throws when the memory is not there (as opposed to a size
// past the limit): a run short of memory, not a malformed operator.
class HostAllocError : public CompileError {
 public:
  using CompileError::CompileError;
};

// A dense row-major array on the host, stored in its dtype's own width so
// that f32 arithmetic rounds as compiled code does. Making one past
// kMaxHostBufferBytes, or whose size overflows, throws CompileError (stage
// Interp) naming its type and shape; HostAllocError when malloc fails.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(ir::DType dtype, std::vector<int64_t> shape);

  ir::DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t size() const { return size_; }  // element count
  // The elements. Copies of a buffer share them until one is written through
  // data() or set_*: a graph's constants and inputs reach every run without a
  // copy, and a kernel's input is read through the const data().
  void* data() {
    own();
    return bytes_ ? bytes_->data() : nullptr;
  }
  const void* data() const { return bytes_ ? bytes_->data() : nullptr; }

  double get_f(int64_t flat) const;    // any dtype, as double
  int64_t get_i(int64_t flat) const;   // integer and bool dtypes
  void set_f(int64_t flat, double v);  // rounds to the dtype
  void set_i(int64_t flat, int64_t v);

  // The same elements seen in `shape` (row-major, as a reshape): false, and
  // nothing changed, when `shape` holds another number of elements.
  bool reshape(const std::vector<int64_t>& shape);

 private:
  ir::DType dtype_ = ir::DType::F32;
  std::vector<int64_t> shape_;
  int64_t size_ = 0;
  std::shared_ptr<std::vector<unsigned char>> bytes_;
  void own();  // a private copy of the elements, when other buffers share them
};

// Everything a run needs: a value for every param and a buffer for every
// input and output (temporaries are made by the run itself).
struct Bindings {
  std::map<std::string, int64_t> params;
  std::map<std::string, HostBuffer> buffers;
};

// A graph's tensors by name.
using Tensors = std::map<std::string, HostBuffer>;

// NumPy's .npy format (version 1.0, little-endian, C order), so that a model's
// inputs and outputs go to and from Python and PyTorch: `kiln run --input
// x=x.npy --save-outputs DIR`. read_npy throws CompileError (stage interp,
// naming `path`) for a file that is not an .npy of bool, int32, int64,
// float32 or float64 in C order, or whose data is short; write_npy throws
// (stage output) when the file cannot be written.
HostBuffer read_npy(const std::string& path);
// The shape an .npy file declares, its header read and checked as read_npy does, its data not.
std::vector<int64_t> npy_shape(const std::string& path);
void write_npy(const HostBuffer& b, const std::string& path);

// Evaluates every extent of b's shape under `params`. Throws CompileError
// (stage Interp) for an extent that is negative or cannot be evaluated (a
// param without a value).
std::vector<int64_t> buffer_shape(const ir::Buf& b, const std::map<std::string, int64_t>& params);

// The buffer `b` binds for argument `buf` of `func`, checked against buf's
// dtype and its shape under b.params. Throws CompileError (stage `stage`)
// when it is missing ("no buffer given for input x of f") or differs
// ("buffer x is f32[4] but f declares it f32[5]").
HostBuffer& bound_buffer(Bindings& b, const ir::Buf& buf, const std::string& func,
                         ErrorStage stage = ErrorStage::Interp);

// Whether the values of input `buf` meet its value spec (range, sorted) under
// `params`: "" when they do, else the error to report, naming the first
// element that does not ("input ptr breaks its value spec in [0, nnz]
// sorted: ptr[3] = 2 is below ptr[2] = 5"). The interpreters and the
// kernel's caller report it the same way. Integer buffers only (float
// inputs are never read as indices); "" for the others.
std::string value_spec_error(const ir::Buf& buf, const HostBuffer& data,
                             const std::map<std::string, int64_t>& params);

}  // namespace kiln
