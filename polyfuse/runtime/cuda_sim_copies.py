"""The CUDA simulator's model of ``cp.async`` (the ``pf_copy_*`` helpers of ``codegen/cuda_micro.py``),
appended to :data:`~polyfuse.runtime.cuda_sim_core.SIM_CORE`.

A copy is checked when it is issued (the source element in bounds, the destination in bounds and, for a
16-byte copy, both aligned to the vector) and its source is read then, as an access of the issuing thread;
the destination is written only when that thread's ``pf_copy_wait<N>()`` leaves at most ``N`` of its
committed groups pending, which is the latest the hardware allows. So a read of the destination between
issue and wait sees the old contents, and shows as a race or a read of unwritten shared memory when
another thread is involved; a missing or too lax wait cannot go unnoticed by a kernel that reads the
copied data. Copies issued by a kernel run without fibers (no barrier) land at once.
"""

ASYNC_COPIES = r"""
/* cp.async (codegen/cuda_micro.py's pf_copy_*): the source is checked and read when the copy is issued; the
   destination is written when a pf_copy_wait covers its group, as the hardware guarantees no earlier */
namespace pfsim {
static void land(const Copy& c)
{
  for (int e = 0; e < c.count; e++) {
    write(*c.array, c.flat + e);
    memcpy((char*) c.dst + (size_t) e * c.bytes, (const char*) c.src + (size_t) e * c.bytes, c.bytes);
  }
}
}
template <typename T> static bool pf_aligned16(const pf_global<T>& g) { return ((unsigned long long) g.p & 15) == 0; }
template <typename T, typename S> static void pf_copy_n(pf_ref<T> dst, const pf_global<S>& src, long long i, int n)
{
  static_assert(sizeof(T) == sizeof(S), "cp.async copies between arrays of one element type");
  if (!src.a) return;
  if (i < 0 || i + n > (long long) src.a->cells.size()) {
    pfsim::out_of_bounds(*src.a, "[" + std::to_string(i) + (n > 1 ? ".." + std::to_string(i + n - 1) : std::string()) + "] (flat, cp.async)");
    return;
  }
  if (dst.flat + n > (long long) dst.a->cells.size() || (n > 1 && (i % n || dst.flat % n))) {
    pfsim::issue(pfsim::thread_name(pfsim::block, pfsim::current) + ": a " + std::to_string(n * (int) sizeof(T)) + "-byte cp.async to " +
                 dst.a->name + " from " + src.a->name + "[" + std::to_string(i) + "] is out of bounds or misaligned");
    return;
  }
  for (int e = 0; e < n; e++) pfsim::read(*src.a, i + e);
  pfsim::Copy c{(void*) dst.p, dst.a, dst.flat, (const void*) (src.p + i), (int) sizeof(T), n};
  if (!pfsim::fibered) { pfsim::land(c); return; }
  pfsim::fibers[pfsim::current].open.push_back(c);
}
template <typename T, typename S> static void pf_copy_async(pf_ref<T> dst, const pf_global<S>& src, long long i) { pf_copy_n(dst, src, i, 1); }
template <typename T, typename S> static void pf_copy_async16(pf_ref<T> dst, const pf_global<S>& src, long long i)
{
  pf_copy_n(dst, src, i, 16 / (int) sizeof(T));
}
/* a 16-byte load from shared memory (the micro-tile's fragments): every element read as an access of the
   thread, the first aligned to the vector and the run inside the array */
template <typename T> static void pf_load16(pf_ref<T> first, typename pf_ref<T>::V* out)
{
  const int n = 16 / (int) sizeof(T);
  if (first.flat % n || first.flat + n > (long long) first.a->cells.size()) {
    pfsim::issue(pfsim::thread_name(pfsim::block, pfsim::current) + ": a 16-byte load from " + first.a->name + " at element " +
                 std::to_string(first.flat) + " is out of bounds or misaligned");
    return;
  }
  for (int e = 0; e < n; e++) {
    pfsim::read(*first.a, first.flat + e);
    out[e] = first.p[e];
  }
}
static void pf_copy_commit(void)
{
  if (!pfsim::fibered) return;
  pfsim::Fiber& f = pfsim::fibers[pfsim::current];
  f.groups.push_back(f.open);
  f.open.clear();
}
template <int N> static void pf_copy_wait(void)
{
  if (!pfsim::fibered) return;
  pfsim::Fiber& f = pfsim::fibers[pfsim::current];
  while ((int) f.groups.size() > N) {
    for (const pfsim::Copy& c : f.groups.front()) pfsim::land(c);
    f.groups.erase(f.groups.begin());
  }
}

"""
