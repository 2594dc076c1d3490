// HostBuffer, a dense row-major array stored in its dtype's own width, and buffer shapes.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kiln/analysis.h"
#include "kiln/buffers.h"
#include "kiln/error.h"

namespace kiln {

namespace {

void check_flat(int64_t flat, int64_t size) {
  if (flat < 0 || flat >= size) {
    throw std::out_of_range("HostBuffer element " + std::to_string(flat) + " of " +
                            std::to_string(size));
  }
}

}  // namespace

bool HostBuffer::reshape(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t e : shape) {
    if (e < 0 || __builtin_mul_overflow(n, e, &n)) return false;
  }
  if (n != size_) return false;
  shape_ = shape;
  return true;
}

HostBuffer::HostBuffer(ir::DType dtype, std::vector<int64_t> shape)
    : dtype_(dtype), shape_(std::move(shape)), size_(1) {
  auto type = [&] {
    return fmt::format("{}[{}]", ir::dtype_name(dtype_), fmt::join(shape_, ", "));
  };
  int64_t bytes = static_cast<int64_t>(ir::dtype_bytes(dtype_));
  for (int64_t extent : shape_) {
    if (extent < 0) throw std::invalid_argument("HostBuffer with a negative extent");
    if (__builtin_mul_overflow(size_, extent, &size_)) {
      throw CompileError(
          ErrorStage::Interp, {},
          fmt::format("a buffer of {} has more elements than a 64-bit count holds", type()));
    }
  }
  int64_t total = 0;
  if (__builtin_mul_overflow(size_, bytes, &total)) {
    throw CompileError(
        ErrorStage::Interp, {},
        fmt::format("a buffer of {} has more bytes than a 64-bit count holds", type()));
  }
  // Zeroing touches every page: past the limit, the kernel's OOM killer would
  // answer instead of an error.
  if (static_cast<uint64_t>(total) > kMaxHostBufferBytes) {
    throw CompileError(ErrorStage::Interp, {},
                       fmt::format("a buffer of {} needs {} bytes, more than the limit of {} "
                                   "(host buffer bytes, docs/limits.md)",
                                   type(), total, kMaxHostBufferBytes));
  }
  try {
    bytes_ = std::make_shared<std::vector<unsigned char>>(static_cast<size_t>(total), 0);
  } catch (const std::bad_alloc&) {
    throw HostAllocError(ErrorStage::Interp, {},
                         fmt::format("cannot allocate a buffer of {}: {} bytes", type(), total));
  }
}

double HostBuffer::get_f(int64_t flat) const {
  check_flat(flat, size_);
  return ir::read_element(dtype_,
                          bytes_->data() + static_cast<size_t>(flat) * ir::dtype_bytes(dtype_));
}

int64_t HostBuffer::get_i(int64_t flat) const {
  check_flat(flat, size_);
  return ir::read_element_int(dtype_,
                              bytes_->data() + static_cast<size_t>(flat) * ir::dtype_bytes(dtype_));
}

void HostBuffer::own() {
  if (bytes_ && bytes_.use_count() > 1)
    bytes_ = std::make_shared<std::vector<unsigned char>>(*bytes_);
}

void HostBuffer::set_f(int64_t flat, double v) {
  check_flat(flat, size_);
  own();
  ir::write_element(dtype_, bytes_->data() + static_cast<size_t>(flat) * ir::dtype_bytes(dtype_),
                    v);
}

void HostBuffer::set_i(int64_t flat, int64_t v) {
  check_flat(flat, size_);
  own();
  ir::write_element_int(dtype_,
                        bytes_->data() + static_cast<size_t>(flat) * ir::dtype_bytes(dtype_), v);
}

std::vector<int64_t> buffer_shape(const ir::Buf& b, const std::map<std::string, int64_t>& params) {
  std::vector<int64_t> shape;
  for (size_t d = 0; d < b.shape.size(); ++d) {
    std::optional<int64_t> extent = ir::eval_int(b.shape[d], params);
    if (!extent) {
      std::string missing;
      for (const std::string& name : ir::free_vars(b.shape[d])) {
        if (params.count(name) == 0) missing += (missing.empty() ? "" : ", ") + name;
      }
      throw CompileError(ErrorStage::Interp, b.where,
                         fmt::format("cannot evaluate extent {} of buffer {} ({}){}", d, b.name,
                                     ir::to_string(b.shape[d]),
                                     missing.empty() ? "" : ": no value for " + missing));
    }
    if (*extent < 0) {
      throw CompileError(ErrorStage::Interp, b.where,
                         fmt::format("buffer {} has negative extent {} in dimension {} ({})",
                                     b.name, *extent, d, ir::to_string(b.shape[d])));
    }
    shape.push_back(*extent);
  }
  return shape;
}

HostBuffer& bound_buffer(Bindings& b, const ir::Buf& buf, const std::string& func,
                         ErrorStage stage) {
  std::vector<int64_t> shape = buffer_shape(buf, b.params);
  auto it = b.buffers.find(buf.name);
  if (it == b.buffers.end()) {
    throw CompileError(stage, buf.where,
                       fmt::format("no buffer given for {} {} of {}", ir::buf_kind_name(buf.kind),
                                   buf.name, func));
  }
  if (it->second.dtype() != buf.dtype || it->second.shape() != shape) {
    throw CompileError(
        stage, buf.where,
        fmt::format("buffer {} is {}[{}] but {} declares it {}[{}]", buf.name,
                    ir::dtype_name(it->second.dtype()), fmt::join(it->second.shape(), ", "), func,
                    ir::dtype_name(buf.dtype), fmt::join(shape, ", ")));
  }
  return it->second;
}

std::string value_spec_error(const ir::Buf& buf, const HostBuffer& data,
                             const std::map<std::string, int64_t>& params) {
  const ir::ValueSpec& spec = buf.values;
  if (!ir::is_int(buf.dtype) || (!spec.lo && !spec.sorted)) return "";
  std::string head = "input " + buf.name + " breaks its value spec " + ir::value_spec_text(spec);
  std::vector<int64_t> shape = data.shape();
  auto element = [&](int64_t flat) {
    std::vector<int64_t> idx(shape.size());
    for (size_t d = shape.size(); d > 0; --d) {
      idx[d - 1] = flat % shape[d - 1];
      flat /= shape[d - 1];
    }
    std::string s = buf.name + "[";
    for (size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
    return s + "]";
  };
  auto bound = [&](const ir::Expr& e) -> std::optional<int64_t> {
    return e ? ir::eval_int(e, params) : std::nullopt;
  };
  std::optional<int64_t> lo = bound(spec.lo), hi = bound(spec.hi);
  auto named = [&](const ir::Expr& e, int64_t v) {
    std::string text = ir::to_string(e);
    return text == std::to_string(v) ? text : fmt::format("{} = {}", text, v);
  };
  for (int64_t k = 0; k < data.size(); ++k) {
    int64_t v = data.get_i(k);
    if (lo && (spec.lo_inclusive ? v < *lo : v <= *lo))
      return fmt::format("{}: {} = {} is below {}", head, element(k), v, named(spec.lo, *lo));
    if (hi && (spec.hi_inclusive ? v > *hi : v >= *hi))
      return fmt::format("{}: {} = {} is {} {}", head, element(k), v,
                         spec.hi_inclusive ? "above" : "not below", named(spec.hi, *hi));
    if (spec.sorted && k > 0 && v < data.get_i(k - 1))
      return fmt::format("{}: {} = {} is below {} = {}, so it is not sorted", head, element(k), v,
                         element(k - 1), data.get_i(k - 1));
  }
  return "";
}

}  // namespace kiln
