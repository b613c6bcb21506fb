/*
 * tileauto._kernel_call: the base class of JITKernel, whose call slot is C.
 *
 * A call of a Python class's instance, k(a), runs its __call__ in a Python frame: on a tiny
 * kernel that frame (argument tuple, attribute reads, branches) is about 150 ns of the 900 ns
 * of the whole call (bench/overhead.py). JITKernel subclasses KernelCall and hands it what it
 * can call without Python, tried in this order:
 *
 *   - "direct", for either form below when every argument is a CPU torch.Tensor and the call
 *     is small: the compiled function called through tvm-ffi's C API with the tensors as
 *     DLTensor views (torch's DLPack C exchange API), no FFI object made (direct_call);
 *   - "fast", for k(*inputs): the native output caller of src/caller.cc, which allocates the
 *     output, runs the kernel and returns the output; k(a) then costs what the native caller
 *     costs plus a C function call;
 *   - "dest", for k(*every_buffer) (destination passing, one output): the kernel itself,
 *     then the output argument is returned.
 *
 * Everything else goes to the Python method _call_python:
 *
 *   - keyword arguments (the method takes none: its TypeError becomes keyword_error's, which
 *     names the kernel), or a count that neither takes;
 *   - fast returned None (it found no framework allocator in the arguments, e.g. numpy
 *     arrays): nothing ran, the Python path allocates and runs.
 *
 * An integer scalar argument outside its dtype's range (TVM would wrap it silently) takes none
 * of these paths either: the Python method names it. See _set_int_ranges.
 *
 * A tensor argument whose data is not aligned as the compiled code assumes (a view such as
 * x[1:]: TVM tells LLVM every buffer is 64-byte aligned, and an aligned vector load of a
 * misaligned address kills the process) takes none of these paths: the Python method names
 * it (or, where a buffer assumes less, calls the kernel). See _set_alignment.
 *
 * When direct, fast or dest raises one of the "argument errors" (exception types set with fast), the
 * kernel's own checks rejected an argument before it ran: the Python method
 * _fast_failed(args, exc) then names the argument (it raises a KernelArgumentError), returns
 * the result of a call it made itself (an empty tensor whose strides TVM refused, given
 * compact ones: the kernel had not run), or, when it finds nothing wrong, returns None and the
 * original error is raised.
 *
 * Without this module (no C compiler at install time), JITKernel's __call__ is
 * _call_python itself: the same results, a Python frame slower.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlpack/dlpack.h>
#include <string.h>
#include <tvm/ffi/c_api.h>

#define DIRECT_MAX_ARGS 16
#define DIRECT_MAX_NDIM 8
/* The direct call keeps the GIL (see direct_call): only for calls over this many bytes at most */
#define DIRECT_MAX_BYTES (256 * 1024)
/* The integer scalar parameters the C slot range-checks (a kernel with more: the Python path) */
#define INT_RANGES_MAX 16

/* The direct call: torch tensors on the CPU handed to the compiled function as DLTensor
 * pointers, with no FFI object in between (see direct_call). */
typedef struct {
  PyObject *func;                /* the tvm_ffi.Function, kept alive; NULL: no direct call */
  TVMFFIObjectHandle handle;     /* its FFI handle */
  PyTypeObject *tensor_type;     /* torch.Tensor (exactly: a subclass takes the other paths) */
  const DLPackExchangeAPI *api;  /* torch's DLPack C exchange API */
  PyObject *error_type;          /* tvm_ffi.core.Error: an FFI error becomes its py_error() */
  int alloc;                     /* k(*inputs) allocates one output (the shape below) */
  int like;                      /* the output takes inputs[like]'s shape; -1: out_shape */
  int out_ndim;
  int64_t out_shape[DIRECT_MAX_NDIM];
  DLDataType out_dtype;
} Direct;

/* An integer scalar parameter: its position among every parameter and among the inputs, and
 * the values its dtype holds (clamped to int64: a larger Python int takes the Python path) */
typedef struct {
  Py_ssize_t full, in;
  long long low, high;
} IntRange;

typedef struct {
  PyObject_HEAD
  Py_ssize_t align;    /* the data alignment (bytes) to check tensors against; 0: none */
  PyTypeObject *align_type;           /* torch.Tensor, whose data pointers are checked */
  const DLPackExchangeAPI *align_api; /* how a torch.Tensor's data pointer is read */
  PyObject *fast;      /* callable or NULL: fast(*inputs) -> output, or None */
  PyObject *errors;    /* exception type or tuple of them, or NULL */
  Py_ssize_t nargs;    /* the argument count the fast callable takes */
  PyObject *dest;      /* callable or NULL: dest(*every_buffer), the kernel itself */
  Py_ssize_t nparams;  /* the argument count dest takes */
  Py_ssize_t out;      /* which of dest's arguments the call returns */
  Direct direct;
  int n_ranges;        /* integer scalars to range-check; 0: none */
  Py_ssize_t range_num_in, range_num_params;  /* the counts whose calls hold them */
  IntRange ranges[INT_RANGES_MAX];
} KernelCall;

static PyObject *str_call_python; /* "_call_python", interned */
static PyObject *str_fast_failed; /* "_fast_failed", interned */

#define KERNEL_CALL_STACK 16

/* self._call_python(*args, **kwargs), without a bound method or a new tuple when it can */
static PyObject *call_python(PyObject *self, PyObject *args, PyObject *kwargs) {
  const Py_ssize_t n = PyTuple_GET_SIZE(args);
  if ((kwargs == NULL || PyDict_GET_SIZE(kwargs) == 0) && n < KERNEL_CALL_STACK) {
    PyObject *stack[KERNEL_CALL_STACK];
    stack[0] = self;
    for (Py_ssize_t i = 0; i < n; ++i) stack[i + 1] = PyTuple_GET_ITEM(args, i);
    return PyObject_VectorcallMethod(str_call_python, stack, (size_t)(n + 1), NULL);
  }
  PyObject *method = PyObject_GetAttr(self, str_call_python);
  if (method == NULL) return NULL;
  PyObject *result = PyObject_Call(method, args, kwargs);
  Py_DECREF(method);
  return result;
}

static PyObject *fast_failed(PyObject *self, PyObject *args) {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  if (traceback != NULL && value != NULL) PyException_SetTraceback(value, traceback);
  PyObject *stack[3] = {self, args, value != NULL ? value : Py_None};
  PyObject *ret = PyObject_VectorcallMethod(str_fast_failed, stack, 3, NULL);
  if (ret == NULL || ret != Py_None) {
    /* it raised the better error (keep that one), or it made the call after all (an empty
     * tensor given the strides TVM checks): its result */
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    return ret;
  }
  Py_DECREF(ret);
  PyErr_Restore(type, value, traceback);  /* nothing better to say: the original error */
  return NULL;
}

/* The allocator's error callback (the GIL is held): a Python exception of the kind's name */
static void set_alloc_error(void *ctx, const char *kind, const char *message) {
  (void)ctx;
  PyObject *type = PyExc_RuntimeError;
  if (strcmp(kind, "ValueError") == 0) type = PyExc_ValueError;
  else if (strcmp(kind, "TypeError") == 0) type = PyExc_TypeError;
  else if (strcmp(kind, "MemoryError") == 0) type = PyExc_MemoryError;
  PyErr_Format(type, "allocating the output: %s", message);
}

/* The FFI error the call raised, as the Python exception tvm-ffi's own call raises for it */
static void raise_ffi_error(const Direct *d) {
  TVMFFIObjectHandle err = NULL;
  TVMFFIErrorMoveFromRaised(&err);
  if (err == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "the kernel failed without an error");
    return;
  }
  const TVMFFIErrorCell *cell = (const TVMFFIErrorCell *)((char *)err + sizeof(TVMFFIObject));
  PyObject *error = PyObject_CallFunction(
      d->error_type, "s#s#s#", cell->kind.data, (Py_ssize_t)cell->kind.size, cell->message.data,
      (Py_ssize_t)cell->message.size, cell->backtrace.data, (Py_ssize_t)cell->backtrace.size);
  TVMFFIObjectDecRef(err);
  if (error == NULL) return;
  PyObject *exc = PyObject_CallMethod(error, "py_error", NULL);
  Py_DECREF(error);
  if (exc == NULL) return;
  PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
  Py_DECREF(exc);
}

/*
 * The direct call: every argument a torch.Tensor on the CPU, passed to the compiled function as
 * a DLTensor pointer. tvm-ffi's own call turns each tensor into a managed DLPack tensor and an
 * FFI Tensor object (two allocations, freed after the call) and, for k(a), hands the output
 * back through an FFI Tensor and a second DLPack export; here each argument's DLTensor is
 * filled in place by torch's DLPack C exchange API (dltensor_from_py_object_no_sync: a view of
 * the tensor's own shape and strides, no allocation), and the output, when the call allocates
 * one, comes from torch's allocator and goes back to torch as it came (bench/overhead.py).
 *
 * A view is only valid while no Python code runs (another thread could resize the tensor), so
 * this call keeps the GIL, and it serves small calls only: at most DIRECT_MAX_BYTES of tensors,
 * where the conversions are the cost and the kernel is over in microseconds (shorter than
 * handing the GIL to a waiting thread and taking it back would be). A larger call takes
 * tvm-ffi's, which releases the GIL while the kernel runs.
 *
 * Returns 0 when it does not apply (an argument that is not a CPU torch.Tensor, too many
 * arguments or bytes): nothing ran, no error is set. Returns 1 when the call was made: *result is the
 * output (alloc), args[out] (destination passing), or NULL with the error set. Returns 2 when
 * a tensor's data is not aligned as kc->align says: nothing ran, the Python method decides.
 */
static int direct_call(KernelCall *kc, PyObject *args, Py_ssize_t n, int alloc,
                       PyObject **result) {
  const Direct *d = &kc->direct;
  const Py_ssize_t total = n + (alloc ? 1 : 0);
  if (total > DIRECT_MAX_ARGS) return 0;
  DLTensor tensors[DIRECT_MAX_ARGS];
  TVMFFIAny packed[DIRECT_MAX_ARGS];
  int64_t total_bytes = 0;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject *arg = PyTuple_GET_ITEM(args, i);
    if (Py_TYPE(arg) != d->tensor_type) return 0;
    if (d->api->dltensor_from_py_object_no_sync(arg, &tensors[i]) != 0) {
      PyErr_Clear();  /* torch cannot view it (e.g. it requires grad): the usual path says so */
      return 0;
    }
    if (tensors[i].device.device_type != kDLCPU) return 0;
    if (kc->align > 1 &&
        ((uintptr_t)tensors[i].data + tensors[i].byte_offset) % (uintptr_t)kc->align != 0) {
      return 2;
    }
    int64_t bytes = ((int64_t)tensors[i].dtype.bits * tensors[i].dtype.lanes + 7) / 8;
    for (int k = 0; k < tensors[i].ndim; ++k) bytes *= tensors[i].shape[k];
    total_bytes += bytes;
    if (total_bytes > DIRECT_MAX_BYTES) return 0;
    packed[i].type_index = kTVMFFIDLTensorPtr;
    packed[i].zero_padding = 0;
    packed[i].v_ptr = &tensors[i];
  }
  DLManagedTensorVersioned *out = NULL;
  if (alloc) {
    DLTensor proto;
    memset(&proto, 0, sizeof(proto));
    if (d->like >= 0) {
      if (d->like >= n) return 0;
      proto.ndim = tensors[d->like].ndim;
      proto.shape = tensors[d->like].shape;
    } else {
      proto.ndim = d->out_ndim;
      proto.shape = (int64_t *)d->out_shape;
    }
    proto.dtype = d->out_dtype;
    int64_t bytes = ((int64_t)proto.dtype.bits * proto.dtype.lanes + 7) / 8;
    for (int k = 0; k < proto.ndim; ++k) bytes *= proto.shape[k];
    if (total_bytes + bytes > DIRECT_MAX_BYTES) return 0;
    proto.device.device_type = kDLCPU;
    proto.device.device_id = 0;
    if (d->api->managed_tensor_allocator(&proto, &out, NULL, set_alloc_error) != 0 ||
        out == NULL) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_MemoryError, "allocating the output failed");
      *result = NULL;
      return 1;
    }
    packed[n].type_index = kTVMFFIDLTensorPtr;
    packed[n].zero_padding = 0;
    packed[n].v_ptr = &out->dl_tensor;
  }
  TVMFFIAny ret;
  ret.type_index = kTVMFFINone;
  ret.zero_padding = 0;
  ret.v_int64 = 0;
  if (TVMFFIFunctionCall(d->handle, packed, (int32_t)total, &ret) != 0) {
    if (out != NULL && out->deleter != NULL) out->deleter(out);
    raise_ffi_error(d);
    *result = NULL;
    return 1;
  }
  if (ret.type_index >= kTVMFFIStaticObjectBegin) TVMFFIObjectDecRef(ret.v_obj);
  if (!alloc) {
    *result = Py_NewRef(PyTuple_GET_ITEM(args, kc->out));
    return 1;
  }
  void *py_out = NULL;
  if (d->api->managed_tensor_to_py_object_no_sync(out, &py_out) != 0) {  /* takes out */
    *result = NULL;
    return 1;
  }
  *result = (PyObject *)py_out;
  return 1;
}

/* Whether a torch.Tensor (or subclass) among args has data that is not kc->align-byte aligned
 * (a plain tensor torch cannot view is left to the path that takes it; a subclass torch cannot
 * view counts as misaligned: the Python method checks it with isinstance). Any other argument
 * but a Python int or float (a numpy array, say) counts as misaligned too: the Python method
 * checks it through DLPack. */
static int misaligned(const KernelCall *kc, PyObject *args, Py_ssize_t n) {
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject *arg = PyTuple_GET_ITEM(args, i);
    /* a subclass too (nn.Parameter, as_subclass): the direct call takes exact tensors only,
     * so a misaligned subclass would reach the fast caller unchecked and crash the process */
    if (!PyObject_TypeCheck(arg, kc->align_type)) {
      if (PyLong_Check(arg) || PyFloat_Check(arg)) continue; /* a scalar */
      return 1; /* another array (numpy aligns to 16 bytes): the Python method checks it */
    }
    DLTensor view;
    if (kc->align_api->dltensor_from_py_object_no_sync(arg, &view) != 0) {
      PyErr_Clear();
      if (Py_TYPE(arg) != kc->align_type) return 1; /* a subclass torch cannot view: Python checks */
      continue;
    }
    if (((uintptr_t)view.data + view.byte_offset) % (uintptr_t)kc->align != 0) return 1;
  }
  return 0;
}

/* Whether an integer scalar among args is one the Python method must look at: outside its
 * dtype's range, or not an exact int (a bool, a numpy integer, a float: the Python method
 * checks those). A call of neither count is left to the paths' own count handling. */
static int int_out_of_range(const KernelCall *kc, PyObject *args, Py_ssize_t n) {
  int full;
  if (n == kc->range_num_params) full = 1;
  else if (n == kc->range_num_in) full = 0;
  else return 0;
  for (int i = 0; i < kc->n_ranges; ++i) {
    const IntRange *r = &kc->ranges[i];
    PyObject *value = PyTuple_GET_ITEM(args, full ? r->full : r->in);
    if (!PyLong_CheckExact(value)) return 1;
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow != 0 || v < r->low || v > r->high) return 1;
  }
  return 0;
}

/* A kernel takes its tensors positionally: a keyword call is a TypeError naming the kernel */
static PyObject *keyword_error(PyObject *self, PyObject *kwargs) {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);  /* the Python method's own TypeError */
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  PyObject *keys = PyDict_Keys(kwargs);
  if (keys == NULL) return NULL;
  PyObject *name = PyObject_GetAttrString(self, "func_name");
  if (name == NULL) {
    PyErr_Clear();
    name = PyUnicode_FromString(Py_TYPE(self)->tp_name);
    if (name == NULL) {
      Py_DECREF(keys);
      return NULL;
    }
  }
  PyErr_Format(PyExc_TypeError,
               "%S: a kernel takes its tensors positionally, in parameter order (inputs, or "
               "every parameter with the outputs to write), got keyword argument(s) %R",
               name, keys);
  Py_DECREF(name);
  Py_DECREF(keys);
  return NULL;
}

static PyObject *KernelCall_call(PyObject *self, PyObject *args, PyObject *kwargs) {
  KernelCall *kc = (KernelCall *)self;
  const Py_ssize_t n = PyTuple_GET_SIZE(args);
  if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
    PyObject *result = call_python(self, args, kwargs);
    /* the Python method takes no keywords: its TypeError named it, not the kernel */
    if (result == NULL && PyErr_ExceptionMatches(PyExc_TypeError)) return keyword_error(self, kwargs);
    return result;
  }
  if (kc->n_ranges > 0 && int_out_of_range(kc, args, n)) return call_python(self, args, kwargs);
  if (kc->direct.func != NULL) {
    const int alloc = kc->direct.alloc && n == kc->nargs;
    if (alloc || (kc->dest != NULL && n == kc->nparams)) {
      PyObject *result = NULL;
      const int called = direct_call(kc, args, n, alloc, &result);
      if (called == 2) return call_python(self, args, kwargs);
      if (called) {
        if (result != NULL) return result;
        if (kc->errors != NULL && PyErr_ExceptionMatches(kc->errors)) {
          return fast_failed(self, args);
        }
        return NULL;
      }
    }
  }
  const int fast = kc->fast != NULL && n == kc->nargs;
  if ((fast || (kc->dest != NULL && n == kc->nparams)) && kc->align > 1 &&
      misaligned(kc, args, n)) {
    return call_python(self, args, kwargs);
  }
  if (fast) {
    PyObject *result = PyObject_Call(kc->fast, args, NULL);
    if (result == Py_None) {
      Py_DECREF(result);  /* nothing ran: the Python path */
    } else if (result != NULL) {
      return result;
    } else if (kc->errors != NULL && PyErr_ExceptionMatches(kc->errors)) {
      return fast_failed(self, args);
    } else {
      return NULL;
    }
  } else if (kc->dest != NULL && n == kc->nparams) {
    PyObject *result = PyObject_Call(kc->dest, args, NULL);
    if (result != NULL) {
      Py_DECREF(result);
      return Py_NewRef(PyTuple_GET_ITEM(args, kc->out));
    }
    if (kc->errors != NULL && PyErr_ExceptionMatches(kc->errors)) return fast_failed(self, args);
    return NULL;
  }
  return call_python(self, args, kwargs);
}

static PyObject *KernelCall_set_dest(PyObject *self, PyObject *args) {
  KernelCall *kc = (KernelCall *)self;
  PyObject *dest;
  Py_ssize_t nparams = 0, out = 0;
  if (!PyArg_ParseTuple(args, "O|nn:_set_dest_call", &dest, &nparams, &out)) return NULL;
  if (dest != Py_None && !PyCallable_Check(dest)) {
    PyErr_Format(PyExc_TypeError, "_set_dest_call(dest=...): expected a callable or None, got %s",
                 Py_TYPE(dest)->tp_name);
    return NULL;
  }
  if (dest != Py_None && (nparams < 1 || out < 0 || out >= nparams)) {
    PyErr_Format(PyExc_ValueError,
                 "_set_dest_call(nparams=%zd, out=%zd): expected nparams >= 1 and "
                 "0 <= out < nparams",
                 nparams, out);
    return NULL;
  }
  Py_XSETREF(kc->dest, dest == Py_None ? NULL : Py_NewRef(dest));
  kc->nparams = nparams;
  kc->out = out;
  Py_RETURN_NONE;
}

static PyObject *KernelCall_set_fast(PyObject *self, PyObject *args) {
  KernelCall *kc = (KernelCall *)self;
  PyObject *fast, *errors = Py_None;
  Py_ssize_t nargs = 0;
  if (!PyArg_ParseTuple(args, "O|nO:_set_fast_call", &fast, &nargs, &errors)) return NULL;
  if (fast != Py_None && !PyCallable_Check(fast)) {
    PyErr_Format(PyExc_TypeError, "_set_fast_call(fast=...): expected a callable or None, got %s",
                 Py_TYPE(fast)->tp_name);
    return NULL;
  }
  if (nargs < 0) {
    PyErr_Format(PyExc_ValueError, "_set_fast_call(nargs=%zd): expected a count >= 0", nargs);
    return NULL;
  }
  Py_XSETREF(kc->fast, fast == Py_None ? NULL : Py_NewRef(fast));
  Py_XSETREF(kc->errors, errors == Py_None ? NULL : Py_NewRef(errors));
  kc->nargs = nargs;
  Py_RETURN_NONE;
}

static void direct_clear(Direct *d) {
  Py_CLEAR(d->func);
  Py_CLEAR(d->tensor_type);
  Py_CLEAR(d->error_type);
  d->handle = NULL;
  d->api = NULL;
  d->alloc = 0;
}

static PyObject *KernelCall_set_direct(PyObject *self, PyObject *args) {
  KernelCall *kc = (KernelCall *)self;
  PyObject *func, *tensor_type = Py_None, *capsule = Py_None, *error_type = Py_None;
  PyObject *shape = Py_None, *dtype = Py_None;
  unsigned long long handle = 0;
  int like = -1;
  if (!PyArg_ParseTuple(args, "O|KOOOOiO:_set_direct_call", &func, &handle, &tensor_type,
                        &capsule, &error_type, &shape, &like, &dtype)) {
    return NULL;
  }
  if (func == Py_None) {
    direct_clear(&kc->direct);
    Py_RETURN_NONE;
  }
  if (handle == 0 || !PyType_Check(tensor_type) || !PyCallable_Check(error_type)) {
    PyErr_SetString(PyExc_TypeError,
                    "_set_direct_call(func, handle, tensor_type, capsule, error_type, ...): "
                    "expected a nonzero handle, a type and a callable");
    return NULL;
  }
  const DLPackExchangeAPI *api =
      (const DLPackExchangeAPI *)PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
  if (api == NULL) return NULL;
  if (api->header.version.major != DLPACK_MAJOR_VERSION ||
      api->dltensor_from_py_object_no_sync == NULL || api->managed_tensor_allocator == NULL ||
      api->managed_tensor_to_py_object_no_sync == NULL) {
    PyErr_Format(PyExc_ValueError,
                 "_set_direct_call(capsule=...): a DLPack exchange API of major version %d "
                 "with a DLTensor view, an allocator and an import was expected, got version "
                 "%u without some of them",
                 DLPACK_MAJOR_VERSION, (unsigned)api->header.version.major);
    return NULL;
  }
  int alloc = 0, ndim = 0;
  int64_t dims[DIRECT_MAX_NDIM];
  DLDataType out_dtype = {0, 0, 0};
  if (dtype != Py_None) {
    unsigned int code = 0, bits = 0, lanes = 0;
    if (!PyArg_ParseTuple(dtype, "III:_set_direct_call dtype", &code, &bits, &lanes)) return NULL;
    out_dtype.code = (uint8_t)code;
    out_dtype.bits = (uint8_t)bits;
    out_dtype.lanes = (uint16_t)lanes;
    if (shape != Py_None) {
      if (!PyTuple_Check(shape) || PyTuple_GET_SIZE(shape) > DIRECT_MAX_NDIM) {
        PyErr_Format(PyExc_ValueError,
                     "_set_direct_call(shape=...): expected a tuple of at most %d ints",
                     DIRECT_MAX_NDIM);
        return NULL;
      }
      ndim = (int)PyTuple_GET_SIZE(shape);
      for (int k = 0; k < ndim; ++k) {
        dims[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, k));
        if (dims[k] == -1 && PyErr_Occurred()) return NULL;
      }
      alloc = 1;
      like = -1;
    } else {
      alloc = like >= 0;
    }
  }
  direct_clear(&kc->direct);
  Direct *d = &kc->direct;
  d->func = Py_NewRef(func);
  d->handle = (TVMFFIObjectHandle)(uintptr_t)handle;
  d->tensor_type = (PyTypeObject *)Py_NewRef(tensor_type);
  d->api = api;
  d->error_type = Py_NewRef(error_type);
  d->alloc = alloc;
  d->like = like;
  d->out_ndim = ndim;
  for (int k = 0; k < ndim; ++k) d->out_shape[k] = dims[k];
  d->out_dtype = out_dtype;
  Py_RETURN_NONE;
}

static PyObject *KernelCall_direct(PyObject *self, void *closure) {
  (void)closure;
  KernelCall *kc = (KernelCall *)self;
  return PyBool_FromLong(kc->direct.func != NULL);
}

static PyObject *KernelCall_fast(PyObject *self, void *closure) {
  (void)closure;
  KernelCall *kc = (KernelCall *)self;
  return Py_NewRef(kc->fast != NULL ? kc->fast : Py_None);
}

static PyObject *KernelCall_set_alignment(PyObject *self, PyObject *args) {
  KernelCall *kc = (KernelCall *)self;
  Py_ssize_t align = 0;
  PyObject *tensor_type = Py_None, *capsule = Py_None;
  if (!PyArg_ParseTuple(args, "n|OO:_set_alignment", &align, &tensor_type, &capsule)) {
    return NULL;
  }
  if (align <= 1) {
    kc->align = 0;
    Py_CLEAR(kc->align_type);
    kc->align_api = NULL;
    Py_RETURN_NONE;
  }
  if (!PyType_Check(tensor_type)) {
    PyErr_SetString(PyExc_TypeError,
                    "_set_alignment(align, tensor_type, capsule): expected a type");
    return NULL;
  }
  const DLPackExchangeAPI *api =
      (const DLPackExchangeAPI *)PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
  if (api == NULL) return NULL;
  if (api->header.version.major != DLPACK_MAJOR_VERSION ||
      api->dltensor_from_py_object_no_sync == NULL) {
    PyErr_Format(PyExc_ValueError,
                 "_set_alignment(capsule=...): a DLPack exchange API of major version %d with a "
                 "DLTensor view was expected, got version %u without it",
                 DLPACK_MAJOR_VERSION, (unsigned)api->header.version.major);
    return NULL;
  }
  kc->align = align;
  Py_XSETREF(kc->align_type, (PyTypeObject *)Py_NewRef(tensor_type));
  kc->align_api = api;
  Py_RETURN_NONE;
}

static PyObject *KernelCall_set_int_ranges(PyObject *self, PyObject *args) {
  KernelCall *kc = (KernelCall *)self;
  PyObject *ranges;
  Py_ssize_t num_in = -1, num_params = -1;
  if (!PyArg_ParseTuple(args, "O!nn:_set_int_ranges", &PyTuple_Type, &ranges, &num_in,
                        &num_params)) {
    return NULL;
  }
  const Py_ssize_t count = PyTuple_GET_SIZE(ranges);
  if (count > INT_RANGES_MAX) {
    PyErr_Format(PyExc_ValueError,
                 "_set_int_ranges(ranges=...): at most %d integer scalars, got %zd",
                 INT_RANGES_MAX, count);
    return NULL;
  }
  IntRange parsed[INT_RANGES_MAX];
  for (Py_ssize_t i = 0; i < count; ++i) {
    IntRange *r = &parsed[i];
    if (!PyArg_ParseTuple(PyTuple_GET_ITEM(ranges, i), "nnLL:_set_int_ranges range", &r->full,
                          &r->in, &r->low, &r->high)) {
      return NULL;
    }
    if (r->full < 0 || r->full >= num_params || r->in < 0 || r->in >= num_in ||
        r->low > r->high) {
      PyErr_Format(PyExc_ValueError,
                   "_set_int_ranges: range %zd (position %zd of %zd, input %zd of %zd, "
                   "%lld..%lld) is out of the call's bounds",
                   i, r->full, num_params, r->in, num_in, r->low, r->high);
      return NULL;
    }
  }
  for (Py_ssize_t i = 0; i < count; ++i) kc->ranges[i] = parsed[i];
  kc->n_ranges = (int)count;
  kc->range_num_in = num_in;
  kc->range_num_params = num_params;
  Py_RETURN_NONE;
}

static int KernelCall_traverse(PyObject *self, visitproc visit, void *arg) {
  KernelCall *kc = (KernelCall *)self;
  Py_VISIT(kc->align_type);
  Py_VISIT(kc->fast);
  Py_VISIT(kc->errors);
  Py_VISIT(kc->dest);
  Py_VISIT(kc->direct.func);
  Py_VISIT(kc->direct.tensor_type);
  Py_VISIT(kc->direct.error_type);
  return 0;
}

static int KernelCall_clear(PyObject *self) {
  KernelCall *kc = (KernelCall *)self;
  Py_CLEAR(kc->align_type);
  kc->align_api = NULL;
  kc->align = 0;
  Py_CLEAR(kc->fast);
  Py_CLEAR(kc->errors);
  Py_CLEAR(kc->dest);
  direct_clear(&kc->direct);
  return 0;
}

static void KernelCall_dealloc(PyObject *self) {
  PyObject_GC_UnTrack(self);
  KernelCall_clear(self);
  Py_TYPE(self)->tp_free(self);
}

static PyMethodDef KernelCall_methods[] = {
    {"_set_fast_call", KernelCall_set_fast, METH_VARARGS,
     "_set_fast_call(fast, nargs=0, errors=None): call fast(*args) for calls of nargs "
     "positional arguments (None: always the Python method _call_python)."},
    {"_set_int_ranges", KernelCall_set_int_ranges, METH_VARARGS,
     "_set_int_ranges(ranges, num_in, num_params): ranges is a tuple of (position among every "
     "parameter, position among the inputs, low, high) per integer scalar; a call of num_in "
     "or num_params arguments with one of them not an int within low..high takes the Python "
     "method."},
    {"_set_dest_call", KernelCall_set_dest, METH_VARARGS,
     "_set_dest_call(dest, nparams=0, out=0): for calls of nparams positional arguments, "
     "call dest(*args) and return args[out] (None: the Python method _call_python)."},
    {"_set_alignment", KernelCall_set_alignment, METH_VARARGS,
     "_set_alignment(align, tensor_type=None, capsule=None): send a call with a tensor_type "
     "argument whose data is not align-byte aligned to the Python method _call_python "
     "(capsule: the DLPack exchange API that reads a tensor's data pointer); align <= 1: never."},
    {"_set_direct_call", KernelCall_set_direct, METH_VARARGS,
     "_set_direct_call(func, handle=0, tensor_type=None, capsule=None, error_type=None, "
     "shape=None, like=-1, dtype=None): call the FFI function at handle with torch tensors as "
     "DLTensor views, for calls that fast (shape or like, and dtype, set: one output "
     "allocated) or dest would serve; None: never."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef KernelCall_getset[] = {
    {"_fast_call", KernelCall_fast, NULL, "the fast callable, or None", NULL},
    {"_direct_call", KernelCall_direct, NULL, "whether the direct call is set", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject KernelCallType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tileauto._kernel_call.KernelCall",
    .tp_basicsize = sizeof(KernelCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A callable whose call goes to a fast callable where it applies, else to the "
              "Python method _call_python (the base class of tileauto's JITKernel).",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = KernelCall_dealloc,
    .tp_traverse = KernelCall_traverse,
    .tp_clear = KernelCall_clear,
    .tp_call = KernelCall_call,
    .tp_methods = KernelCall_methods,
    .tp_getset = KernelCall_getset,
};

static struct PyModuleDef kernel_call_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tileauto._kernel_call",
    .m_doc = "The C call slot of tileauto's JITKernel (see src/kernel_call.c).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__kernel_call(void) {
  str_call_python = PyUnicode_InternFromString("_call_python");
  str_fast_failed = PyUnicode_InternFromString("_fast_failed");
  if (str_call_python == NULL || str_fast_failed == NULL) return NULL;
  if (PyType_Ready(&KernelCallType) < 0) return NULL;
  PyObject *module = PyModule_Create(&kernel_call_module);
  if (module == NULL) return NULL;
  if (PyModule_AddObjectRef(module, "KernelCall", (PyObject *)&KernelCallType) < 0) {
    Py_DECREF(module);
    return NULL;
  }
  return module;
}
