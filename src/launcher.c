/*
 * tileauto._launcher: the parallel launcher of tileauto's CPU kernels.
 *
 * A CPU kernel that TVM compiled with parallel loops calls its parallel bodies through a
 * function pointer of its own library, the data symbol __TVMBackendParallelLaunch, which TVM's
 * loader points at TVM's thread pool when it loads the library. install(path) points it here
 * instead, in a library that is already loaded.
 *
 * Why: TVM's pool waits for its workers in the launching thread with sched_yield (its
 * ParallelLauncher::WaitForJobs). On a machine whose cores other processes want, each yield
 * hands the core to another runnable thread for its whole time slice, so a parallel region
 * whose slower half finished long ago waits for that slice to end: a 512^3 GEMM of 0.8 ms ran
 * at 1.4-11 ms per call under two busy processes on 2 cores, process to process
 * (bench/thread_pool.py). This pool waits as an OpenMP runtime does: the launching thread runs
 * task 0, then spins with a pause instruction while the others finish (it keeps its core) and
 * sleeps on a futex only after a while; the workers spin briefly after a region, then sleep on
 * a futex until the next launch. How long each spins, and whether the workers keep to one CPU
 * each, follows the machine's load, re-read every 20 ms (apply_busy_rule, place_workers).
 *
 * One pool per process, shared by every kernel library installed here; its size is set with
 * set_threads (the last count set holds). A launch that finds the pool busy (another thread is
 * launching, or a parallel body launches again) runs its tasks serially in its own thread,
 * which is correct for TVM's bodies: each task computes its share from env->num_task. A child
 * made by fork() starts with no workers (pthread_atfork) and makes its own on its first launch.
 * An error raised by a task on a worker (TVM-FFI's thread-local error) is moved to the
 * launching thread and raised there, as TVM's pool does. Libraries that use TVM's parallel
 * barrier (__TVMBackendParallelBarrier) are not installed: they keep TVM's pool.
 *
 * Linux only (futex); elsewhere install() installs nothing and TVM's pool runs the kernels.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <stdint.h>

#if defined(__linux__)
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <tvm/ffi/c_api.h>
#include <unistd.h>
#define TILEAUTO_LAUNCHER 1
#endif

#ifdef TILEAUTO_LAUNCHER

/* TVM's TVMParallelGroupEnv and FTVMParallelLambda (tvm/runtime/c_backend_api.h). */
typedef struct {
  void *sync_handle;
  int32_t num_task;
} ParallelEnv;
typedef int (*ParallelLambda)(int task_id, ParallelEnv *env, void *cdata);

#define MAX_THREADS 256

static struct {
  _Atomic uint32_t generation; /* futex word of the workers: bumped by every launch */
  _Atomic int32_t pending;     /* workers of this launch still running their tasks */
  _Atomic uint32_t finished;   /* futex word of the launching thread: the last generation done */
  _Atomic int32_t sleeping;    /* workers asleep on generation */
  _Atomic int32_t caller_sleeping;
  _Atomic int32_t busy; /* a launch is running */
  _Atomic int32_t team; /* threads of this launch, the caller included */
  ParallelLambda lambda;
  void *cdata;
  ParallelEnv env;
  int workers; /* worker threads started in this process */
  uint32_t start_generation[MAX_THREADS];
  TVMFFIObjectHandle errors[MAX_THREADS]; /* the error a worker's task raised, or NULL */
  /* placement, changed by the launching thread only (place_workers) */
  pthread_t threads[MAX_THREADS];
  int worker_cpu[MAX_THREADS]; /* the CPU a worker is pinned to, or -1 */
  int pinned;                  /* the workers are pinned (quiet) or free (busy) */
  cpu_set_t mask;              /* the CPUs of the thread that started the pool */
  int cpus[CPU_SETSIZE];
  int cpu_count;
  _Atomic int32_t failed;
} pool;

/* Settings and counters: written under the GIL, read by launches. */
static _Atomic int32_t pool_threads = 1;
static _Atomic int64_t worker_spin_ns = 200000;  /* quiet machine */
static _Atomic int64_t caller_spin_ns = 1000000; /* quiet machine */
static _Atomic int64_t caller_busy_spin_ns = 20000;
static _Atomic int32_t spin_mode = -1; /* -1: the busy rule decides; 0: always spin; 1: never */
static _Atomic uint64_t count_launches, count_serial, count_caller_sleeps, count_busy_launches;
static _Atomic uint64_t count_probes, count_moves;

/* The busy rule, re-applied while the process runs: every PROBE_NS at most, the launching
 * thread reads how many threads are runnable on the machine (the fourth field of
 * /proc/loadavg), less itself and the pool's workers that are spinning; the pool is "busy"
 * when the median of the last PROBES reads plus the launch's threads is more than the
 * machine's CPUs. Busy, the workers sleep as soon as a region ends and the launching thread
 * spins only caller_busy_spin_ns: a spinning thread is one more CPU-bound thread there, which
 * the scheduler charges to this process (measured: a 256^3 GEMM 0.18 ms per call, 1-thread
 * speed, the fair share, against 0.39-0.60 ms spinning, under one or two busy processes on 2
 * cores; quiet, spinning keeps 0.14 ms against 0.25 ms). */
#define PROBES 5
#define PROBE_NS 20000000u
static int probe_others[PROBES];
static int probe_count;
static uint64_t next_probe_ns;
static _Atomic int32_t busy_now;
static _Atomic int32_t spinning_workers;
static _Atomic int32_t last_others = -1;
static int machine_cpus = 1;
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static inline uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void futex_wait(_Atomic uint32_t *word, uint32_t value) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, value, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *word, int count) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
}

/* Spin (with a pause) until (*word == value) == until_equal, for at most spin_ns; whether it
 * happened. */
static int spin_for(_Atomic uint32_t *word, uint32_t value, int until_equal, int64_t spin_ns) {
  uint64_t deadline = 0;
  for (unsigned i = 0;; ++i) {
    if ((atomic_load_explicit(word, memory_order_acquire) == value) == until_equal) return 1;
    if (spin_ns <= 0) return 0;
    cpu_relax();
    if ((i & 63) == 63) {
      uint64_t t = now_ns();
      if (deadline == 0) {
        deadline = t + (uint64_t)spin_ns;
      } else if (t >= deadline) {
        return 0;
      }
    }
  }
}

static void run_tasks(int first, int team, int *rc, TVMFFIObjectHandle *error) {
  int num_task = pool.env.num_task;
  for (int task = first; task < num_task; task += team) {
    if (pool.lambda(task, &pool.env, pool.cdata) != 0) {
      *rc = -1;
      if (error != NULL) TVMFFIErrorMoveFromRaised(error);
      return;
    }
  }
}

/* Where the workers run. On a quiet machine each worker keeps to one CPU of the launching
 * thread's (the mask it had when the pool started), never the CPU the launching thread is on
 * at the launch: unpinned, a worker woken after the pool slept often landed on the launching
 * thread's CPU, where the two took turns until the scheduler's next balance (the first 6-8
 * calls of a 256^3 GEMM after a 300 ms pause: 0.59 ms instead of 0.13 ms), and a launching
 * thread that moves onto a worker's CPU has the same effect (softmax 0.7 ms instead of 0.25
 * ms); so when it has moved, that worker moves to a CPU that is free. On a busy machine the
 * workers may run anywhere: pinned, a worker waits for its one CPU while another process holds
 * it (mean call 0.44 ms instead of 0.19 ms under two busy processes on 2 cores). Only the
 * launching thread, holding the pool, changes where workers run: a system call per worker
 * when the verdict changes or the launching thread has moved, none otherwise. */
static void pin_worker(int id, int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (pthread_setaffinity_np(pool.threads[id], sizeof one, &one) == 0) pool.worker_cpu[id] = cpu;
  atomic_fetch_add(&count_moves, 1);
}

static int cpu_in_use(int cpu, int team, int here) {
  if (cpu == here) return 1;
  for (int id = 1; id < team; ++id) {
    if (pool.worker_cpu[id] == cpu) return 1;
  }
  return 0;
}

static void place_workers(int team, int busy) {
  if (pool.cpu_count <= 1) return;
  if (busy) {
    if (!pool.pinned) return;
    for (int id = 1; id <= pool.workers; ++id) {
      pthread_setaffinity_np(pool.threads[id], sizeof pool.mask, &pool.mask);
      pool.worker_cpu[id] = -1;
    }
    pool.pinned = 0;
    return;
  }
  int here = sched_getcpu();
  for (int id = 1; id < team; ++id) {
    if (pool.worker_cpu[id] >= 0 && pool.worker_cpu[id] != here) continue;
    /* unplaced, or where the launching thread is now: the first CPU nobody uses, else any */
    int chosen = -1;
    for (int i = 0; i < pool.cpu_count && chosen < 0; ++i) {
      if (!cpu_in_use(pool.cpus[i], team, here)) chosen = pool.cpus[i];
    }
    if (chosen < 0) chosen = pool.cpus[id % pool.cpu_count];
    if (chosen != pool.worker_cpu[id]) pin_worker(id, chosen);
  }
  pool.pinned = 1;
}

static void *worker_main(void *arg) {
  int id = (int)(intptr_t)arg;
  uint32_t seen = pool.start_generation[id];
  for (;;) {
    int64_t spin = atomic_load(&busy_now) ? 0 : atomic_load(&worker_spin_ns);
    atomic_fetch_add(&spinning_workers, 1);
    int woken = spin_for(&pool.generation, seen, 0, spin);
    atomic_fetch_sub(&spinning_workers, 1);
    if (!woken) {
      atomic_fetch_add(&pool.sleeping, 1);
      while (atomic_load(&pool.generation) == seen) futex_wait(&pool.generation, seen);
      atomic_fetch_sub(&pool.sleeping, 1);
    }
    seen = atomic_load_explicit(&pool.generation, memory_order_acquire);
    int team = atomic_load(&pool.team);
    if (id >= team) continue; /* not in this launch's team */
    int rc = 0;
    run_tasks(id, team, &rc, &pool.errors[id]);
    if (rc != 0) atomic_store(&pool.failed, 1);
    if (atomic_fetch_sub(&pool.pending, 1) == 1) {
      atomic_store(&pool.finished, seen); /* releases the launch of generation `seen` */
      if (atomic_load(&pool.caller_sleeping)) futex_wake(&pool.finished, 1);
    }
  }
  return NULL;
}

/* Start workers up to `wanted` (never more than MAX_THREADS - 1); the count running. */
static int ensure_workers(int wanted) {
  if (wanted > MAX_THREADS - 1) wanted = MAX_THREADS - 1;
  pthread_mutex_lock(&start_lock);
  if (pool.workers == 0 && pool.cpu_count == 0) {
    pool.cpu_count = 0;
    if (sched_getaffinity(0, sizeof pool.mask, &pool.mask) == 0) {
      for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (CPU_ISSET(cpu, &pool.mask)) pool.cpus[pool.cpu_count++] = cpu;
      }
    }
  }
  while (pool.workers < wanted) {
    int id = pool.workers + 1;
    pool.start_generation[id] = atomic_load(&pool.generation);
    pool.worker_cpu[id] = -1;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t thread;
    int failed = pthread_create(&thread, &attr, worker_main, (void *)(intptr_t)id);
    pthread_attr_destroy(&attr);
    if (failed) break;
    pool.threads[id] = thread;
    pool.workers = id;
  }
  int got = pool.workers;
  pthread_mutex_unlock(&start_lock);
  return got;
}

static int launch_serial(ParallelLambda lambda, void *cdata, int num_task) {
  ParallelEnv env = {NULL, num_task > 0 ? num_task : 1};
  atomic_fetch_add(&count_serial, 1);
  for (int task = 0; task < env.num_task; ++task) {
    if (lambda(task, &env, cdata) != 0) return -1;
  }
  return 0;
}

/* Runnable threads on the machine (running/total in /proc/loadavg); -1 if unknown. */
static int runnable_threads(void) {
  int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char text[128];
  ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return -1;
  text[n] = 0;
  char *field = text;
  for (int i = 0; i < 3; ++i) { /* skip the three load averages */
    field = strchr(field, ' ');
    if (field == NULL) return -1;
    ++field;
  }
  if (*field < '0' || *field > '9') return -1;
  return atoi(field);
}

static int compare_ints(const void *a, const void *b) {
  return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

/* Called by the launching thread, holding the pool: re-apply the busy rule when it is due. */
static void apply_busy_rule(int team) {
  int mode = atomic_load(&spin_mode);
  if (mode >= 0) {
    atomic_store(&busy_now, mode);
    return;
  }
  uint64_t t = now_ns();
  if (t < next_probe_ns) return;
  /* reads older than the window say nothing about now (the process was not launching: it
   * slept, or ran other work): start again, quiet until three reads say otherwise */
  if (t > next_probe_ns + (uint64_t)PROBE_NS * PROBES) probe_count = 0;
  next_probe_ns = t + PROBE_NS;
  int running = runnable_threads();
  atomic_fetch_add(&count_probes, 1);
  if (running < 0) { /* no /proc/loadavg: spin, as TVM's pool does */
    atomic_store(&busy_now, 0);
    return;
  }
  int others = running - 1 - atomic_load(&spinning_workers);
  if (others < 0) others = 0;
  atomic_store(&last_others, others);
  probe_others[probe_count++ % PROBES] = others;
  int count = probe_count < PROBES ? probe_count : PROBES;
  int sorted[PROBES];
  memcpy(sorted, probe_others, sizeof sorted);
  qsort(sorted, (size_t)count, sizeof sorted[0], compare_ints);
  /* one or two reads are not load yet: a thread that happened to be runnable, or a worker
   * this launch just started */
  atomic_store(&busy_now, count >= 3 && sorted[count / 2] + team > machine_cpus);
}

/* What the kernel's __TVMBackendParallelLaunch points at once installed. */
static int parallel_launch(ParallelLambda lambda, void *cdata, int num_task) {
  int threads = atomic_load(&pool_threads);
  int32_t idle = 0;
  if (threads <= 1 || !atomic_compare_exchange_strong(&pool.busy, &idle, 1)) {
    return launch_serial(lambda, cdata, num_task);
  }
  apply_busy_rule(threads);
  int team = ensure_workers(threads - 1) + 1;
  if (team > threads) team = threads;
  if (team <= 1) {
    atomic_store(&pool.busy, 0);
    return launch_serial(lambda, cdata, num_task);
  }
  int busy = atomic_load(&busy_now);
  if (busy) atomic_fetch_add(&count_busy_launches, 1);
  place_workers(team, busy);
  pool.lambda = lambda;
  pool.cdata = cdata;
  pool.env.sync_handle = NULL;
  pool.env.num_task = num_task > 0 ? num_task : team;
  atomic_store(&pool.team, team);
  atomic_store(&pool.failed, 0);
  atomic_store(&pool.pending, team - 1);
  uint32_t generation = atomic_fetch_add(&pool.generation, 1) + 1;
  if (atomic_load(&pool.sleeping) > 0) futex_wake(&pool.generation, INT32_MAX);

  int rc = 0;
  run_tasks(0, team, &rc, NULL); /* an error stays in this thread's slot, where it belongs */

  int64_t spin = atomic_load(&busy_now) ? caller_busy_spin_ns : caller_spin_ns;
  if (!spin_for(&pool.finished, generation, 1, spin)) {
    atomic_fetch_add(&count_caller_sleeps, 1);
    atomic_store(&pool.caller_sleeping, 1);
    uint32_t seen;
    while ((seen = atomic_load(&pool.finished)) != generation) futex_wait(&pool.finished, seen);
    atomic_store(&pool.caller_sleeping, 0);
  }

  if (atomic_load(&pool.failed)) {
    for (int id = 1; id < team; ++id) {
      if (pool.errors[id] == NULL) continue;
      if (rc == 0) {
        TVMFFIErrorSetRaised(pool.errors[id]); /* takes its own reference */
        rc = -1;
      }
      TVMFFIObjectDecRef(pool.errors[id]);
      pool.errors[id] = NULL;
    }
  }
  atomic_fetch_add(&count_launches, 1);
  atomic_store(&pool.busy, 0);
  return rc;
}

/* In a child made by fork(): the parent's workers do not exist here. */
static void after_fork_in_child(void) {
  pthread_mutex_init(&start_lock, NULL);
  pool.workers = 0;
  pool.pinned = 0;
  pool.cpu_count = 0;
  atomic_store(&pool.busy, 0);
  atomic_store(&pool.sleeping, 0);
  atomic_store(&pool.caller_sleeping, 0);
  atomic_store(&pool.pending, 0);
  atomic_store(&spinning_workers, 0);
  probe_count = 0;
  next_probe_ns = 0;
  for (int id = 0; id < MAX_THREADS; ++id) pool.errors[id] = NULL; /* not ours to free here */
}

#endif /* TILEAUTO_LAUNCHER */

PyDoc_STRVAR(install_doc,
             "install(path) -> str\n\n"
             "Point the parallel launch of the loaded kernel library at `path` at this pool.\n"
             "Returns 'installed', 'no-parallel' (it has no parallel loops), 'barrier' (it\n"
             "uses TVM's parallel barrier: it keeps TVM's pool), 'not-loaded' (no library\n"
             "of that path is loaded in this process) or 'unsupported' (not Linux).");

static PyObject *launcher_install(PyObject *self, PyObject *args) {
  (void)self;
  const char *path;
  if (!PyArg_ParseTuple(args, "s:install", &path)) return NULL;
#ifdef TILEAUTO_LAUNCHER
  void *handle = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (handle == NULL) return PyUnicode_FromString("not-loaded");
  const char *result = "installed";
  void **slot = (void **)dlsym(handle, "__TVMBackendParallelLaunch");
  if (slot == NULL) {
    result = "no-parallel";
  } else if (dlsym(handle, "__TVMBackendParallelBarrier") != NULL) {
    result = "barrier";
  } else {
    *slot = (void *)&parallel_launch;
  }
  dlclose(handle);
  return PyUnicode_FromString(result);
#else
  return PyUnicode_FromString("unsupported");
#endif
}

static PyObject *launcher_set_threads(PyObject *self, PyObject *args) {
  (void)self;
  int threads;
  if (!PyArg_ParseTuple(args, "i:set_threads", &threads)) return NULL;
  if (threads < 1) {
    PyErr_Format(PyExc_ValueError, "threads must be >= 1, got %d", threads);
    return NULL;
  }
#ifdef TILEAUTO_LAUNCHER
  if (threads > MAX_THREADS) threads = MAX_THREADS;
  atomic_store(&pool_threads, threads);
#endif
  return PyLong_FromLong(threads);
}

static PyObject *launcher_threads(PyObject *self, PyObject *noargs) {
  (void)self;
  (void)noargs;
#ifdef TILEAUTO_LAUNCHER
  return PyLong_FromLong(atomic_load(&pool_threads));
#else
  return PyLong_FromLong(1);
#endif
}

static PyObject *launcher_set_spin(PyObject *self, PyObject *args) {
  (void)self;
  long long worker, caller, caller_busy;
  int mode;
  if (!PyArg_ParseTuple(args, "LLLi:set_spin", &worker, &caller, &caller_busy, &mode)) return NULL;
#ifdef TILEAUTO_LAUNCHER
  atomic_store(&worker_spin_ns, worker);
  atomic_store(&caller_spin_ns, caller);
  atomic_store(&caller_busy_spin_ns, caller_busy);
  atomic_store(&spin_mode, mode < 0 ? -1 : (mode ? 1 : 0));
  next_probe_ns = 0;
#endif
  Py_RETURN_NONE;
}

static PyObject *launcher_stats(PyObject *self, PyObject *noargs) {
  (void)self;
  (void)noargs;
#ifdef TILEAUTO_LAUNCHER
  return Py_BuildValue(
      "{s:K,s:K,s:K,s:K,s:K,s:K,s:i,s:i,s:i,s:i,s:i,s:L,s:L,s:L}", "launches",
      (unsigned long long)atomic_load(&count_launches), "serial",
      (unsigned long long)atomic_load(&count_serial), "caller_sleeps",
      (unsigned long long)atomic_load(&count_caller_sleeps), "busy_launches",
      (unsigned long long)atomic_load(&count_busy_launches), "probes",
      (unsigned long long)atomic_load(&count_probes), "moves",
      (unsigned long long)atomic_load(&count_moves), "busy", atomic_load(&busy_now),
      "others", atomic_load(&last_others), "spin_mode", atomic_load(&spin_mode), "workers",
      pool.workers, "threads", atomic_load(&pool_threads), "worker_spin_ns",
      (long long)atomic_load(&worker_spin_ns), "caller_spin_ns",
      (long long)atomic_load(&caller_spin_ns), "caller_busy_spin_ns",
      (long long)atomic_load(&caller_busy_spin_ns));
#else
  return PyDict_New();
#endif
}

#ifdef TILEAUTO_LAUNCHER
/* A parallel body for the tests: task `failing` fails (with a TVM-FFI error naming it); the
 * others add their task id + 1 to the call's sum. */
typedef struct {
  _Atomic int64_t sum;
  int failing;
} SelfTest;

static int selftest_body(int task_id, ParallelEnv *env, void *cdata) {
  (void)env;
  SelfTest *test = (SelfTest *)cdata;
  if (task_id == test->failing) {
    char message[64];
    snprintf(message, sizeof message, "task %d failed on purpose", task_id);
    TVMFFIErrorSetRaisedFromCStr("ValueError", message);
    return -1;
  }
  atomic_fetch_add(&test->sum, task_id + 1);
  return 0;
}
#endif

PyDoc_STRVAR(selftest_doc,
             "_selftest(num_task, failing_task) -> (rc, sum, error)\n\n"
             "Tests: launch a C body through the pool; task `failing_task` (-1: none) raises.");

static PyObject *launcher_selftest(PyObject *self, PyObject *args) {
  (void)self;
  int num_task, failing;
  if (!PyArg_ParseTuple(args, "ii:_selftest", &num_task, &failing)) return NULL;
#ifdef TILEAUTO_LAUNCHER
  SelfTest test = {0, failing};
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = parallel_launch(selftest_body, &test, num_task);
  Py_END_ALLOW_THREADS PyObject *message = Py_None;
  Py_INCREF(message);
  if (rc != 0) {
    TVMFFIObjectHandle error = NULL;
    TVMFFIErrorMoveFromRaised(&error);
    if (error != NULL) {
      const TVMFFIErrorCell *cell =
          (const TVMFFIErrorCell *)((char *)error + sizeof(TVMFFIObject));
      Py_DECREF(message);
      message = PyUnicode_FromStringAndSize(cell->message.data, (Py_ssize_t)cell->message.size);
      TVMFFIObjectDecRef(error);
      if (message == NULL) return NULL;
    }
  }
  return Py_BuildValue("(iLN)", rc, (long long)atomic_load(&test.sum), message);
#else
  (void)num_task;
  (void)failing;
  PyErr_SetString(PyExc_NotImplementedError, "tileauto's launcher runs on Linux only");
  return NULL;
#endif
}

static PyMethodDef launcher_methods[] = {
    {"install", launcher_install, METH_VARARGS, install_doc},
    {"set_threads", launcher_set_threads, METH_VARARGS,
     "set_threads(n) -> int\n\nThreads of every later launch, the launching one included."},
    {"threads", launcher_threads, METH_NOARGS, "threads() -> int\n\nThe launch's thread count."},
    {"set_spin", launcher_set_spin, METH_VARARGS,
     "set_spin(worker_ns, caller_ns, caller_busy_ns, mode)\n\nHow long workers and the "
     "launching thread spin before they sleep (quiet machine; the launching thread on a busy "
     "one); mode -1: the busy rule decides, 0: always quiet, 1: always busy."},
    {"stats", launcher_stats, METH_NOARGS, "stats() -> dict\n\nCounters of this process."},
    {"_selftest", launcher_selftest, METH_VARARGS, selftest_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef launcher_module = {
    PyModuleDef_HEAD_INIT, "tileauto._launcher",
    "tileauto's parallel launcher for CPU kernels (src/launcher.c).", -1, launcher_methods,
};

PyMODINIT_FUNC PyInit__launcher(void) {
#ifdef TILEAUTO_LAUNCHER
  pthread_atfork(NULL, NULL, after_fork_in_child);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  machine_cpus = cpus > 0 ? (int)cpus : 1;
#endif
  return PyModule_Create(&launcher_module);
}
