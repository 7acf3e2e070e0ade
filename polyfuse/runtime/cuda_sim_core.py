"""The C++ half of the CUDA simulator (:mod:`polyfuse.runtime.cuda_sim`): CUDA's built-ins for host C++,
threads as fibers, and the shadow state that finds races.

Execution model. Blocks of a launch run one after another. Within a block, each CUDA thread is a fiber
(``ucontext``) with its own stack, so automatic variables are private as on the GPU, and ``__shared__``
arrays become function statics, one copy seen by the block's threads. The scheduler runs every fiber
until it reaches ``__syncthreads()``, a warp shuffle, or its end; when all of the block's live threads
wait at a barrier, the block's *epoch* advances and they resume; when all 32 lanes of a warp wait at a
shuffle, the exchange happens with the values each lane passed. Kernels with neither barriers nor
shuffles run each thread as a plain call (no fiber).

Race detection. Every element of every global array (registered by the Python side with its name and
shape) and of every ``__shared__`` array has a shadow cell: the last writer (launch, block, thread,
epoch) and a summary of its readers since that write. Two accesses of one launch, at least one a write,
by different threads, conflict unless they are in the same block and in different epochs (a barrier
separates them). Launches are ordered by the stream, so nothing conflicts across launches. Shared cells
only remember accesses of the current block (shared memory is per block), and a read of a shared element
that no thread of the block has written is reported too. Indices outside an array are reported and
redirected to a scratch element, so the simulation never corrupts memory. A barrier that some live
thread of the block never reaches (it exited, waits at another ``__syncthreads()``, or waits at a
shuffle) stops the launch with a report.

``atomicAdd`` on a global element is an atomic update: several threads' atomics never conflict, but an
atomic and a plain access of other threads, unordered, do. What it does not model: warp-synchronous
programming without shuffles (threads of one warp are not assumed to run in lockstep, which is stricter
than the hardware), memory fences and other atomics. ``cp.async`` is modelled in ``cuda_sim_copies.py``
(each fiber keeps its copies in flight, committed in groups).
"""

SIM_CORE = r"""
/* polyfuse CUDA simulator: runtime (generated CUDA follows, instrumented) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <functional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__
#define __launch_bounds__(...)
struct pf_dim3 { unsigned x, y, z; };
static pf_dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace pfsim {
enum State { RUNNING, AT_BARRIER, AT_SHUFFLE, DONE };
struct Array;
struct Copy {            /* a cp.async issued and not landed yet */
  void* dst; Array* array; long long flat; const void* src; int bytes, count;
};
struct Fiber {
  std::vector<std::vector<Copy>> groups;  /* committed cp.async groups, oldest first */
  std::vector<Copy> open;                 /* issued since the last commit */
  ucontext_t ctx;
  State state;
  int line;              /* of the __syncthreads() it waits at */
  pf_dim3 tid;
  int lane_mask;         /* of the shuffle it waits at */
  unsigned char value[16], result[16];
};
static const size_t STACK = 128 * 1024;
static std::vector<Fiber> fibers;
static char* stacks = 0;
static size_t stacks_for = 0;
static ucontext_t scheduler;
static int current = 0;           /* linear thread index in the block of the thread running */
static bool fibered = false;      /* threads of this launch run as fibers */
static std::function<void()>* body = 0;
static long long launch = 0;      /* launches so far: the current one's number */
static int block = 0;             /* linear index of the running block in its launch */
static int epoch = 0;             /* barriers the running block has passed */
static const char* kernel = "";
static bool stop = false;         /* a barrier problem: the launch is abandoned */
static long long issue_count = 0;
static std::vector<std::string> issues, later;  /* later: reads of unwritten shared memory, listed last
                                                  (usually the consequence of a race found too) */

static void issue(const std::string& what, bool secondary = false)
{
  issue_count++;
  std::vector<std::string>& list = secondary ? later : issues;
  if (list.size() < 20) list.push_back(std::string(kernel) + ": " + what);
}

static void barrier_issue(const std::string& what)  /* first in the list: it stopped the launch */
{
  issue_count++;
  issues.insert(issues.begin(), std::string(kernel) + ": " + what);
}

static std::string thread_name(int blk, int thr)
{
  char s[160];
  unsigned bx = blk % gridDim.x, by = (blk / gridDim.x) % gridDim.y, bz = blk / (gridDim.x * gridDim.y);
  unsigned tx = thr % blockDim.x, ty = (thr / blockDim.x) % blockDim.y, tz = thr / (blockDim.x * blockDim.y);
  snprintf(s, sizeof s, "block (%u,%u,%u) thread (%u,%u,%u)", bx, by, bz, tx, ty, tz);
  return s;
}

struct Cell {
  long long w_launch = 0, r_launch = 0, x_launch = 0;   /* x: the latest atomic update */
  int x_block = 0, x_thread = 0, x_epoch = 0;
  int w_block = 0, w_thread = 0, w_epoch = 0;
  int r_block = 0, r_thread = 0, r_other = -1, r_epoch = 0;  /* readers in the latest (block, epoch) */
  int r_old_block = -1, r_old_thread = 0;                     /* a reader in an earlier block */
};
struct Array {
  std::string name;
  bool shared = false;
  std::vector<long long> dims;
  std::vector<Cell> cells;
};

static std::string element(const Array& a, long long flat)
{
  std::string s = a.name;
  if (a.dims.empty()) return s;
  std::vector<long long> idx(a.dims.size());
  for (size_t k = a.dims.size(); k-- > 0;) {
    long long d = a.dims[k] > 0 ? a.dims[k] : 1;
    idx[k] = k == 0 ? flat : flat % d;
    flat = k == 0 ? flat : flat / d;
  }
  for (long long i : idx) s += "[" + std::to_string(i) + "]";
  return s;
}

static bool unordered(int blk, int thr, int ep)
{
  if (blk == block && thr == current) return false;
  return blk != block || ep == epoch;
}

static void conflict(const Array& a, long long flat, const char* did, int blk, int thr, const char* other_did)
{
  std::string where = blk == block ? "in the same barrier interval of its block" : "in another block of the same launch";
  issue(thread_name(block, current) + " " + did + " " + (a.shared ? "__shared__ " : "") + element(a, flat) + ", which " +
        thread_name(blk, thr) + " " + other_did + " " + where + " (a data race)");
}

static void forget_other_blocks(const Array& a, Cell& c)
{
  if (!a.shared) return;  /* shared memory is per block: another block's accesses are to another copy */
  if (c.w_launch == launch && c.w_block != block) c.w_launch = 0;
  if (c.r_launch == launch && c.r_block != block) c.r_launch = 0;
  if (c.r_launch == launch) c.r_old_block = -1;
}

/* an access (``did``) of the running thread against the cell's atomic updates and its writer; true when
   it conflicts with the writer */
static bool against_writers(const Array& a, const Cell& c, long long flat, const char* did)
{
  if (c.x_launch == launch && unordered(c.x_block, c.x_thread, c.x_epoch))
    conflict(a, flat, did, c.x_block, c.x_thread, "updates atomically");
  if (c.w_launch == launch && unordered(c.w_block, c.w_thread, c.w_epoch)) {
    conflict(a, flat, did, c.w_block, c.w_thread, "writes");
    return true;
  }
  return false;
}

static void read(Array& a, long long flat)
{
  Cell& c = a.cells[flat];
  forget_other_blocks(a, c);
  if (!against_writers(a, c, flat, "reads") && a.shared && c.w_launch != launch)
    issue(thread_name(block, current) + " reads __shared__ " + element(a, flat) + ", which no thread of its block has written", true);
  if (c.r_launch != launch) {
    c.r_launch = launch; c.r_block = block; c.r_thread = current; c.r_other = -1; c.r_epoch = epoch; c.r_old_block = -1;
  } else if (c.r_block != block) {
    c.r_old_block = c.r_block; c.r_old_thread = c.r_thread;
    c.r_block = block; c.r_thread = current; c.r_other = -1; c.r_epoch = epoch;
  } else if (c.r_epoch != epoch) {
    c.r_epoch = epoch; c.r_thread = current; c.r_other = -1;
  } else if (c.r_thread != current && c.r_other < 0) {
    c.r_other = current;
  }
}

/* a write (or atomic update, ``did``) of the running thread against the cell's readers since the last write */
static void against_readers(const Array& a, const Cell& c, long long flat, const char* did)
{
  if (c.r_launch != launch) return;
  if (c.r_old_block >= 0) conflict(a, flat, did, c.r_old_block, c.r_old_thread, "reads");
  else if (c.r_block != block) conflict(a, flat, did, c.r_block, c.r_thread, "reads");
  else if (c.r_epoch == epoch) {
    int other = c.r_thread != current ? c.r_thread : c.r_other;
    if (other >= 0) conflict(a, flat, did, block, other, "reads");
  }
}

static void write(Array& a, long long flat)
{
  Cell& c = a.cells[flat];
  forget_other_blocks(a, c);
  if (!against_writers(a, c, flat, "writes"))
    against_readers(a, c, flat, "writes");
  c.w_launch = launch; c.w_block = block; c.w_thread = current; c.w_epoch = epoch;
  c.r_launch = 0;
}

/* an atomic read-modify-write: unordered with plain accesses of other threads, not with other atomics */
static void atomic(Array& a, long long flat)
{
  Cell& c = a.cells[flat];
  if (c.w_launch == launch && unordered(c.w_block, c.w_thread, c.w_epoch))
    conflict(a, flat, "updates atomically", c.w_block, c.w_thread, "writes");
  else
    against_readers(a, c, flat, "updates atomically");
  c.x_launch = launch; c.x_block = block; c.x_thread = current; c.x_epoch = epoch;
}

static std::unordered_map<const void*, Array*> registered;

static void out_of_bounds(const Array& a, const std::string& index)
{
  issue(thread_name(block, current) + " accesses " + (a.shared ? "__shared__ " : "") + a.name + index + " out of bounds (shape " +
        [&] { std::string s; for (long long d : a.dims) s += "[" + std::to_string(d) + "]"; return s.empty() ? std::string("scalar") : s; }() + ")");
}

static void run_fiber()
{
  (*body)();
  fibers[current].state = DONE;
}

static void resume(int t)
{
  current = t;
  threadIdx = fibers[t].tid;
  swapcontext(&scheduler, &fibers[t].ctx);
}

static void wait(State s)
{
  fibers[current].state = s;
  swapcontext(&fibers[current].ctx, &scheduler);
}

/* one block, its threads as fibers; false when a barrier or shuffle problem stopped it */
static bool run_block(int n)
{
  if ((size_t) n > stacks_for) {
    if (stacks) munmap(stacks, stacks_for * STACK);
    stacks = (char*) mmap(0, n * STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    stacks_for = n;
  }
  fibers.assign(n, Fiber());
  for (int t = 0; t < n; t++) {
    Fiber& f = fibers[t];
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = stacks + (size_t) t * STACK;
    f.ctx.uc_stack.ss_size = STACK;
    f.ctx.uc_link = &scheduler;
    makecontext(&f.ctx, run_fiber, 0);
    f.state = RUNNING;
    f.tid = pf_dim3{t % blockDim.x, (t / blockDim.x) % blockDim.y, t / (blockDim.x * blockDim.y)};
  }
  for (;;) {
    for (int t = 0; t < n; t++)
      if (fibers[t].state == RUNNING) resume(t);
    bool released = false;
    for (int w = 0; w * 32 < n; w++) {
      int lo = w * 32, hi = lo + 32 < n ? lo + 32 : n, waiting = 0, done = 0;
      for (int t = lo; t < hi; t++) { waiting += fibers[t].state == AT_SHUFFLE; done += fibers[t].state == DONE; }
      if (waiting == 0) continue;
      if (waiting + done < hi - lo) continue;  /* others still on their way (at a barrier: found below) */
      if (hi - lo < 32 || done) {
        current = lo;
        barrier_issue(thread_name(block, lo) + ": __shfl_xor_sync over a full warp, but " +
              (hi - lo < 32 ? "the block has only " + std::to_string(hi - lo) + " threads in this warp" : std::string("some lanes have exited")));
        return false;
      }
      for (int t = lo; t < hi; t++) {
        int partner = lo + (((t - lo) ^ fibers[t].lane_mask) & 31);
        memcpy(fibers[t].result, fibers[partner].value, sizeof fibers[t].result);
      }
      for (int t = lo; t < hi; t++) fibers[t].state = RUNNING;
      released = true;
    }
    if (released) continue;
    int at_barrier = 0, at_shuffle = 0, done = 0, first = -1;
    for (int t = 0; t < n; t++) {
      State s = fibers[t].state;
      at_barrier += s == AT_BARRIER; at_shuffle += s == AT_SHUFFLE; done += s == DONE;
      if (s == AT_BARRIER && first < 0) first = t;
    }
    if (at_barrier == 0 && at_shuffle == 0) return true;
    if (at_barrier == 0 || at_shuffle || done) {
      int idle = first >= 0 ? first : 0;
      current = idle;
      std::string why = at_shuffle ? std::to_string(at_shuffle) + " wait at a warp shuffle" : std::to_string(done) + " have exited";
      barrier_issue(thread_name(block, idle) + ": __syncthreads() (line " + std::to_string(first >= 0 ? fibers[first].line : 0) +
            ") is reached by " + std::to_string(at_barrier) + " of the block's " + std::to_string(n) + " threads; " + why +
            " (a barrier every thread of the block must reach)");
      return false;
    }
    for (int t = 0; t < n; t++)
      if (fibers[t].line != fibers[first].line) {
        current = t;
        barrier_issue(thread_name(block, t) + " waits at the __syncthreads() of line " + std::to_string(fibers[t].line) + " while " +
              thread_name(block, first) + " waits at line " + std::to_string(fibers[first].line) + " (divergent barriers)");
        return false;
      }
    epoch++;
    for (int t = 0; t < n; t++) fibers[t].state = RUNNING;
  }
}

static int run_launch(const char* name, const unsigned* g, const unsigned* b, std::function<void()>& fn, bool with_fibers)
{
  kernel = name;
  launch++;
  gridDim = pf_dim3{g[0], g[1], g[2]};
  blockDim = pf_dim3{b[0], b[1], b[2]};
  body = &fn;
  fibered = with_fibers;
  stop = false;
  int n = (int) (b[0] * b[1] * b[2]);
  for (unsigned gz = 0; gz < g[2] && !stop; gz++)
    for (unsigned gy = 0; gy < g[1] && !stop; gy++)
      for (unsigned gx = 0; gx < g[0] && !stop; gx++) {
        blockIdx = pf_dim3{gx, gy, gz};
        block = (int) ((gz * g[1] + gy) * g[0] + gx);
        epoch = 0;
        if (with_fibers) {
          if (!run_block(n)) stop = true;
        } else {
          for (int t = 0; t < n; t++) {
            current = t;
            threadIdx = pf_dim3{t % b[0], (t / b[0]) % b[1], t / (b[0] * b[1])};
            fn();
          }
        }
      }
  return stop;
}
}  /* namespace pfsim */

static inline void pf_syncthreads(int line)
{
  if (!pfsim::fibered) { pfsim::issue("__syncthreads() in a kernel the simulator ran without barriers"); return; }
  pfsim::fibers[pfsim::current].line = line;
  pfsim::wait(pfsim::AT_BARRIER);
}
#define __syncthreads() pf_syncthreads(__LINE__)

template <typename T> static T __shfl_xor_sync(unsigned, T v, int lane_mask, int = 32)
{
  static_assert(sizeof(T) <= 16, "shuffled values are at most 16 bytes");
  if (!pfsim::fibered) { pfsim::issue("__shfl_xor_sync in a kernel the simulator ran without fibers"); return v; }
  pfsim::Fiber& f = pfsim::fibers[pfsim::current];
  memcpy(f.value, &v, sizeof(T));
  f.lane_mask = lane_mask;
  pfsim::wait(pfsim::AT_SHUFFLE);
  T r;
  memcpy(&r, pfsim::fibers[pfsim::current].result, sizeof(T));
  return r;
}

/* an element of a tracked array: reading converts, writing assigns; each records its access */
template <typename T> struct pf_ref {
  typedef typename std::remove_const<T>::type V;
  V* p; pfsim::Array* a; long long flat;
  operator V() const { pfsim::read(*a, flat); return *p; }
  pf_ref& operator=(V v) { pfsim::write(*a, flat); *p = v; return *this; }
  pf_ref& operator=(const pf_ref& o) { V v = o; return *this = v; }
  template <typename U> pf_ref& operator=(const pf_ref<U>& o) { V v = (typename pf_ref<U>::V) o; return *this = v; }
  pf_ref& operator+=(V v) { V old = *this; return *this = (V) (old + v); }
  pf_ref& operator-=(V v) { V old = *this; return *this = (V) (old - v); }
  pf_ref& operator*=(V v) { V old = *this; return *this = (V) (old * v); }
  pf_ref& operator/=(V v) { V old = *this; return *this = (V) (old / v); }
};

template <typename T> static pf_ref<T> pf_scratch_ref()
{
  static typename std::remove_const<T>::type scratch;
  static pfsim::Array none = [] { pfsim::Array a; a.name = "(out of bounds)"; a.cells.resize(1); return a; }();
  none.cells[0] = pfsim::Cell();
  return pf_ref<T>{&scratch, &none, 0};
}

/* a kernel's pointer parameter: flat indices, checked against the registered array's size */
template <typename T> struct pf_global {
  T* p; pfsim::Array* a;
  pf_global(T* raw, const char* name) : p(raw), a(0)
  {
    auto it = pfsim::registered.find((const void*) raw);
    if (it != pfsim::registered.end()) a = it->second;
    else pfsim::issue(std::string("array argument ") + name + " is not a buffer the simulator allocated");
  }
  pf_ref<T> operator[](long long i) const
  {
    if (!a) return pf_scratch_ref<T>();
    if (i < 0 || i >= (long long) a->cells.size()) {
      pfsim::out_of_bounds(*a, "[" + std::to_string(i) + "] (flat)");
      return pf_scratch_ref<T>();
    }
    return pf_ref<T>{(typename pf_ref<T>::V*) p + i, a, i};
  }
};

/* ``array + index``: the address of an element, for atomicAdd */
template <typename T> struct pf_address { const pf_global<T>* g; long long i; };
template <typename T> pf_address<T> operator+(const pf_global<T>& g, long long i) { return pf_address<T>{&g, i}; }
template <typename T, typename U> static T atomicAdd(pf_address<T> at, U v)
{
  pfsim::Array* a = at.g->a;
  if (!a) return T();
  if (at.i < 0 || at.i >= (long long) a->cells.size()) {
    pfsim::out_of_bounds(*a, "[" + std::to_string(at.i) + "] (flat, atomicAdd)");
    return T();
  }
  pfsim::atomic(*a, at.i);
  T* p = at.g->p + at.i;
  T old = *p;
  *p = old + (T) v;
  return old;
}

/* one dimension of a __shared__ array being indexed: R dimensions remain */
template <typename T, int R> struct pf_view {
  T* p; pfsim::Array* a; long long offset; int level; std::string index;
  auto operator[](long long i) const
  {
    std::string at = index + "[" + std::to_string(i) + "]";
    long long extent = a->dims[level];
    bool outside = i < 0 || i >= extent;
    long long flat = offset * extent + (outside ? 0 : i);
    if constexpr (R == 1) {
      if (outside || offset < 0) { if (offset >= 0) pfsim::out_of_bounds(*a, at); return pf_scratch_ref<T>(); }
      return pf_ref<T>{p + flat, a, flat};
    } else {
      if (outside && offset >= 0) pfsim::out_of_bounds(*a, at + "...");
      return pf_view<T, R - 1>{p, a, outside ? -1 : flat, level + 1, at};
    }
  }
};

template <typename T, long long... D> struct pf_shared {
  static constexpr long long count = (D * ...);
  T data[count];
  pfsim::Array a;
  explicit pf_shared(const char* name)
  {
    a.name = name; a.shared = true; a.dims = {D...}; a.cells.resize(count);
  }
  auto operator[](long long i) { return pf_view<T, sizeof...(D)>{data, &a, 0, 0, ""}[i]; }
};

extern "C" void pfsim_register(const void* p, const char* name, int ndim, const long long* dims, long long count)
{
  pfsim::Array* a = new pfsim::Array();
  a->name = name;
  a->dims.assign(dims, dims + ndim);
  a->cells.resize(count > 0 ? count : 1);
  if (count == 0) a->cells.clear();
  auto it = pfsim::registered.find(p);
  if (it != pfsim::registered.end()) delete it->second;
  pfsim::registered[p] = a;
}
extern "C" void pfsim_forget(void)
{
  for (auto& kv : pfsim::registered) delete kv.second;
  pfsim::registered.clear();
}
extern "C" long long pfsim_issue_count(void) { return pfsim::issue_count; }
extern "C" int pfsim_issues_kept(void)
{
  size_t n = pfsim::issues.size() + pfsim::later.size();
  return (int) (n < 20 ? n : 20);
}
extern "C" const char* pfsim_issue(int k)
{
  return (size_t) k < pfsim::issues.size() ? pfsim::issues[k].c_str() : pfsim::later[k - pfsim::issues.size()].c_str();
}
extern "C" void pfsim_reset(void) { pfsim::issue_count = 0; pfsim::issues.clear(); pfsim::later.clear(); }
"""
"""The simulator's runtime, put in front of the instrumented kernels."""
