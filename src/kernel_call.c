/*
 * tileauto._kernel_call: the base class of JITKernel, whose call slot is C.
 *
 * A call of a Python class's instance, k(a), runs its __call__ in a Python frame: on a tiny
 * kernel that frame (argument tuple, attribute reads, branches) is about 150 ns of the 900 ns
 * of the whole call (bench/overhead.py). JITKernel subclasses KernelCall and hands it what it
 * can call without Python:
 *
 *   - "fast", for k(*inputs): the native output caller of src/caller.cc, which allocates the
 *     output, runs the kernel and returns the output; k(a) then costs what the native caller
 *     costs plus a C function call;
 *   - "dest", for k(*every_buffer) (destination passing, one output): the kernel itself,
 *     then the output argument is returned.
 *
 * Everything else goes to the Python method _call_python:
 *
 *   - keyword arguments, or a count that neither takes;
 *   - fast returned None (it found no framework allocator in the arguments, e.g. numpy
 *     arrays): nothing ran, the Python path allocates and runs.
 *
 * When fast or dest raises one of the "argument errors" (exception types set with fast), the
 * kernel's own checks rejected an argument before it ran: the Python method
 * _fast_failed(args, exc) then names the argument (it raises a KernelArgumentError) or, when
 * it finds nothing wrong, the original error is raised. The kernel is never run a second time.
 *
 * Without this module (no C compiler at install time), JITKernel's __call__ is
 * _call_python itself: the same results, a Python frame slower.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef struct {
  PyObject_HEAD
  PyObject *fast;      /* callable or NULL: fast(*inputs) -> output, or None */
  PyObject *errors;    /* exception type or tuple of them, or NULL */
  Py_ssize_t nargs;    /* the argument count the fast callable takes */
  PyObject *dest;      /* callable or NULL: dest(*every_buffer), the kernel itself */
  Py_ssize_t nparams;  /* the argument count dest takes */
  Py_ssize_t out;      /* which of dest's arguments the call returns */
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
  if (ret == NULL) {  /* it raised the better error: keep that one */
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    return NULL;
  }
  Py_DECREF(ret);
  PyErr_Restore(type, value, traceback);  /* nothing better to say: the original error */
  return NULL;
}

static PyObject *KernelCall_call(PyObject *self, PyObject *args, PyObject *kwargs) {
  KernelCall *kc = (KernelCall *)self;
  const Py_ssize_t n = PyTuple_GET_SIZE(args);
  if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) return call_python(self, args, kwargs);
  if (kc->fast != NULL && n == kc->nargs) {
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

static PyObject *KernelCall_fast(PyObject *self, void *closure) {
  (void)closure;
  KernelCall *kc = (KernelCall *)self;
  return Py_NewRef(kc->fast != NULL ? kc->fast : Py_None);
}

static int KernelCall_traverse(PyObject *self, visitproc visit, void *arg) {
  KernelCall *kc = (KernelCall *)self;
  Py_VISIT(kc->fast);
  Py_VISIT(kc->errors);
  Py_VISIT(kc->dest);
  return 0;
}

static int KernelCall_clear(PyObject *self) {
  KernelCall *kc = (KernelCall *)self;
  Py_CLEAR(kc->fast);
  Py_CLEAR(kc->errors);
  Py_CLEAR(kc->dest);
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
    {"_set_dest_call", KernelCall_set_dest, METH_VARARGS,
     "_set_dest_call(dest, nparams=0, out=0): for calls of nparams positional arguments, "
     "call dest(*args) and return args[out] (None: the Python method _call_python)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef KernelCall_getset[] = {
    {"_fast_call", KernelCall_fast, NULL, "the fast callable, or None", NULL},
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
