/*
 * tileauto native kernel caller: the output of a kernel call allocated in C++.
 *
 * Registers the global FFI function "tileauto.native.output_caller":
 *
 *   output_caller(f: Function, shape: Shape, dtype: DLDataType, device: Device,
 *                 like: int) -> Function
 *
 * The returned function g, called as g(*inputs), allocates one output tensor of `shape`
 * (or, when like >= 0, of the shape of inputs[like]: an output shaped like an input, whatever
 * sizes its symbolic dimensions take), `dtype` and `device`, calls f(*inputs, out) and
 * returns out. The output is contiguous. The output comes from the
 * caller's environment allocator (TVMFFIEnvTensorAlloc): when the call comes from Python with
 * torch tensors, tvm-ffi installs torch's DLPack allocator for the duration of the call and
 * hands the returned tensor back as a torch.Tensor, so g(a) returns what
 * f(a, torch.empty_like(template)) would, without a Python call to torch in between.
 *
 * g returns None, allocates nothing and runs nothing when no environment allocator is
 * installed (no argument came from a framework that provides one) or when inputs[like] is
 * missing or not a tensor: the caller then takes its own path (which reports a bad argument).
 */
#include <tvm/ffi/any.h>
#include <tvm/ffi/container/shape.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/reflection/registry.h>

#include <array>
#include <optional>
#include <vector>

namespace tileauto {
namespace native {
namespace {

namespace ffi = tvm::ffi;

constexpr const char* kOutputCallerName = "tileauto.native.output_caller";
constexpr int kStackArgs = 16;

ffi::Function OutputCaller(ffi::Function f, ffi::Shape shape, DLDataType dtype, DLDevice device,
                           int64_t like) {
  return ffi::Function::FromPacked(
      [f, shape, dtype, device, like](ffi::PackedArgs args, ffi::Any* rv) {
        const int n = args.size();
        if (TVMFFIEnvGetDLPackManagedTensorAllocator() == nullptr) {
          *rv = nullptr;  // no framework allocator: the caller allocates
          return;
        }
        ffi::Tensor out;
        if (like >= 0) {
          auto input = like < n ? args[like].try_cast<DLTensor*>() : std::nullopt;
          if (!input.has_value()) {
            *rv = nullptr;  // not a tensor: the caller's path names the bad argument
            return;
          }
          const DLTensor* t = *input;
          out = ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc,
                                          ffi::ShapeView(t->shape, static_cast<size_t>(t->ndim)),
                                          dtype, device);
        } else {
          out = ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, shape, dtype, device);
        }
        // the inputs and the output, on the stack for the usual few arguments
        std::array<ffi::AnyView, kStackArgs> small;
        std::vector<ffi::AnyView> large;
        ffi::AnyView* full = small.data();
        if (n + 1 > kStackArgs) {
          large.resize(static_cast<size_t>(n) + 1);
          full = large.data();
        }
        for (int i = 0; i < n; ++i) full[i] = args[i];
        full[n] = out;
        ffi::Any ignored;
        f.CallPacked(ffi::PackedArgs(full, n + 1), &ignored);
        *rv = std::move(out);
      });
}

}  // namespace
}  // namespace native
}  // namespace tileauto

TVM_FFI_STATIC_INIT_BLOCK() {
  namespace refl = tvm::ffi::reflection;
  // As in timer.cc: a second copy of this library in one process must not register again.
  if (tvm::ffi::Function::GetGlobal(tileauto::native::kOutputCallerName).has_value()) return;
  refl::GlobalDef().def(
      tileauto::native::kOutputCallerName, tileauto::native::OutputCaller,
      "output_caller(f, shape, dtype, device, like) -> Function g: g(*inputs) allocates one "
      "output (shape, or inputs[like]'s shape when like >= 0; dtype, device) with the "
      "environment allocator, calls f(*inputs, out) and returns out; None when no environment "
      "allocator is installed or inputs[like] is not a tensor.");
}
