/*
 * tileauto native timing helper.
 *
 * Registers the global FFI function "tileauto.native.time_function":
 *
 *   time_function(f: Function, repeat: int, flush_bytes: int, *args) -> Shape (ints)
 *
 * It calls f(*args) `repeat` times and returns the wall time of each call in nanoseconds,
 * measured with std::chrono::steady_clock around the call only. The arguments are forwarded
 * unchanged (as the AnyViews the caller passed in), so tensors converted once from DLPack at
 * the boundary are reused by every call. When flush_bytes > 0, a buffer of that many bytes is
 * written and read before each call, outside the timed region, to evict the CPU caches.
 *
 * The timing is host wall time: for asynchronous devices the caller's f must synchronize.
 */
#include <tvm/ffi/any.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/shape.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

namespace tileauto {
namespace native {
namespace {

namespace ffi = tvm::ffi;

constexpr const char* kTimeFunctionName = "tileauto.native.time_function";
constexpr int kNumFixedArgs = 3;
constexpr size_t kCacheLineBytes = 64;

/*! \brief Writes then reads a private buffer so that the next timed call starts with cold caches. */
class CacheFlusher {
 public:
  explicit CacheFlusher(int64_t num_bytes) : buffer_(static_cast<size_t>(num_bytes)) {}

  void Flush() {
    if (buffer_.empty()) return;
    // A new fill value each time, so no line can be skipped as already holding it.
    std::memset(buffer_.data(), static_cast<int>(++round_ & 0xFF), buffer_.size());
    uint64_t sum = 0;
    for (size_t i = 0; i < buffer_.size(); i += kCacheLineBytes) {
      sum += static_cast<unsigned char>(buffer_[i]);
    }
    sink_ = sink_ + sum;  // volatile store: keeps the write and the read loop alive
  }

 private:
  std::vector<char> buffer_;
  uint64_t round_ = 0;
  volatile uint64_t sink_ = 0;
};

void TimeFunction(ffi::PackedArgs args, ffi::Any* rv) {
  if (args.size() < kNumFixedArgs) {
    TVM_FFI_THROW(TypeError) << "tileauto.native.time_function(f, repeat, flush_bytes, *args) "
                             << "expects at least " << kNumFixedArgs << " arguments, got "
                             << args.size();
  }
  auto f = args[0].try_cast<ffi::Function>();
  if (!f.has_value()) {
    TVM_FFI_THROW(TypeError) << "tileauto.native.time_function: argument `f` must be an FFI "
                             << "Function (or a Python callable), got " << args[0].GetTypeKey();
  }
  const int64_t repeat = args[1].cast<int64_t>();
  const int64_t flush_bytes = args[2].cast<int64_t>();
  if (repeat < 1) {
    TVM_FFI_THROW(ValueError) << "tileauto.native.time_function: `repeat` must be >= 1, got "
                              << repeat;
  }
  if (flush_bytes < 0) {
    TVM_FFI_THROW(ValueError) << "tileauto.native.time_function: `flush_bytes` must be >= 0, got "
                              << flush_bytes;
  }
  const ffi::PackedArgs call_args = args.Slice(kNumFixedArgs);
  CacheFlusher flusher(flush_bytes);
  std::vector<int64_t> samples_ns;
  samples_ns.reserve(static_cast<size_t>(repeat));
  for (int64_t i = 0; i < repeat; ++i) {
    flusher.Flush();
    ffi::Any result;  // destroyed after the second clock read, outside the timed region
    const auto start = std::chrono::steady_clock::now();
    f->CallPacked(call_args, &result);
    const auto stop = std::chrono::steady_clock::now();
    samples_ns.push_back(
        std::chrono::duration_cast<std::chrono::nanoseconds>(stop - start).count());
  }
  // A Shape reaches Python as a tuple in one copy; an Array's elements are fetched one call at
  // a time, which made converting 100,000 samples take 30 s (quadratic in the count).
  *rv = ffi::Shape(std::move(samples_ns));
}

}  // namespace
}  // namespace native
}  // namespace tileauto

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  // A second copy of this library in one process (say a dev build next to the installed one)
  // must not register again: a duplicate registration throws from a static initializer, and
  // that aborts the process inside dlopen. The first copy wins.
  if (tvm::ffi::Function::GetGlobal(tileauto::native::kTimeFunctionName).has_value()) return;
  refl::GlobalDef().def_packed(
      tileauto::native::kTimeFunctionName, tileauto::native::TimeFunction,
      "time_function(f, repeat, flush_bytes, *args) -> Shape: nanoseconds of each of "
      "`repeat` calls f(*args), timed with steady_clock; flush_bytes > 0 evicts the CPU caches "
      "before each call, outside the timed region.");
}
