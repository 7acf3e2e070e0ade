"""The C prelude's portable vector types and operations (GCC/Clang vector extensions), printed into the
generated C wherever a kernel uses them: the register micro-kernel (``codegen/c_micro.py``) and the
shifted stencil reads (``codegen/c_shift.py``)."""

from __future__ import annotations

VECTOR_HELPERS = """
#if defined(__AVX512F__)
#define PF_VBYTES 64
#elif defined(__AVX__)
#define PF_VBYTES 32
#else
#define PF_VBYTES 16
#endif
typedef float pf_vf32 __attribute__((vector_size(PF_VBYTES)));
typedef double pf_vf64 __attribute__((vector_size(PF_VBYTES)));
#define PF_VL_f32 (PF_VBYTES / 4)
#define PF_VL_f64 (PF_VBYTES / 8)
static inline pf_vf32 pf_vload_f32(const float *p) { pf_vf32 v; __builtin_memcpy(&v, p, sizeof v); return v; }
static inline void pf_vstore_f32(float *p, pf_vf32 v) { __builtin_memcpy(p, &v, sizeof v); }
static inline pf_vf32 pf_vset_f32(float x) { pf_vf32 zero = {0}; return x - zero; }  /* x - 0 is x: a broadcast */
static inline pf_vf64 pf_vload_f64(const double *p) { pf_vf64 v; __builtin_memcpy(&v, p, sizeof v); return v; }
static inline void pf_vstore_f64(double *p, pf_vf64 v) { __builtin_memcpy(p, &v, sizeof v); }
static inline pf_vf64 pf_vset_f64(double x) { pf_vf64 zero = {0}; return x - zero; }
typedef float pf_hf32 __attribute__((vector_size(PF_VBYTES / 2)));
typedef double pf_hf64 __attribute__((vector_size(PF_VBYTES / 2)));
#define PF_HL_f32 (PF_VBYTES / 8)
#define PF_HL_f64 (PF_VBYTES / 16)
static inline pf_hf32 pf_hload_f32(const float *p) { pf_hf32 v; __builtin_memcpy(&v, p, sizeof v); return v; }
static inline void pf_hstore_f32(float *p, pf_hf32 v) { __builtin_memcpy(p, &v, sizeof v); }
static inline pf_hf32 pf_hset_f32(float x) { pf_hf32 zero = {0}; return x - zero; }
static inline pf_hf64 pf_hload_f64(const double *p) { pf_hf64 v; __builtin_memcpy(&v, p, sizeof v); return v; }
static inline void pf_hstore_f64(double *p, pf_hf64 v) { __builtin_memcpy(p, &v, sizeof v); }
static inline pf_hf64 pf_hset_f64(double x) { pf_hf64 zero = {0}; return x - zero; }
#if defined(__AVX512F__) && defined(__FMA__)
#define PF_HFMA_f32(a, b, c) __builtin_ia32_vfmaddps256((a), (b), (c))
#define PF_HFMA_f64(a, b, c) __builtin_ia32_vfmaddpd256((a), (b), (c))
#elif defined(__FMA__) && !defined(__AVX512F__)
#define PF_HFMA_f32(a, b, c) __builtin_ia32_vfmaddps((a), (b), (c))
#define PF_HFMA_f64(a, b, c) __builtin_ia32_vfmaddpd((a), (b), (c))
#else
#define PF_HFMA_f32(a, b, c) ((a) * (b) + (c))
#define PF_HFMA_f64(a, b, c) ((a) * (b) + (c))
#endif
#if defined(__AVX512F__)
#define PF_VFMA_f32(a, b, c) __builtin_ia32_vfmaddps512_mask((a), (b), (c), (unsigned short)-1, 4)
#define PF_VFMA_f64(a, b, c) __builtin_ia32_vfmaddpd512_mask((a), (b), (c), (unsigned char)-1, 4)
#elif defined(__FMA__)
#define PF_VFMA_f32(a, b, c) __builtin_ia32_vfmaddps256((a), (b), (c))
#define PF_VFMA_f64(a, b, c) __builtin_ia32_vfmaddpd256((a), (b), (c))
#else
#define PF_VFMA_f32(a, b, c) ((a) * (b) + (c))
#define PF_VFMA_f64(a, b, c) ((a) * (b) + (c))
#endif
#if defined(__FMA__) || defined(__AVX512F__)
#define PF_SFMA_f32(a, b, c) __builtin_fmaf(a, b, c)
#define PF_SFMA_f64(a, b, c) __builtin_fma(a, b, c)
#else
#define PF_SFMA_f32(a, b, c) ((a) * (b) + (c))
#define PF_SFMA_f64(a, b, c) ((a) * (b) + (c))
#endif
#if !defined(PF_MASKED_TAILS)  /* -DPF_MASKED_TAILS=0: half-vector and one-lane strips instead */
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#define PF_MASKED_TAILS 1
#else
#define PF_MASKED_TAILS 0
#endif
#endif
#if PF_MASKED_TAILS
/* the first n lanes of a vector (AVX-512 masks): loads leave the others zero and never touch their memory */
#define PF_LANE_MASK(n) ((1u << (n)) - 1u)
static inline pf_vf32 pf_mload_f32(const float *p, unsigned m) { return __builtin_ia32_loadups512_mask(p, (pf_vf32){0}, (unsigned short)m); }
static inline void pf_mstore_f32(float *p, pf_vf32 v, unsigned m) { __builtin_ia32_storeups512_mask(p, v, (unsigned short)m); }
static inline pf_vf64 pf_mload_f64(const double *p, unsigned m) { return __builtin_ia32_loadupd512_mask(p, (pf_vf64){0}, (unsigned char)m); }
static inline void pf_mstore_f64(double *p, pf_vf64 v, unsigned m) { __builtin_ia32_storeupd512_mask(p, v, (unsigned char)m); }
#endif
"""
"""Vector types of the machine's widest SIMD registers and of half of them (GCC/Clang vector extensions),
unaligned loads and stores, broadcasts, and fused multiply-add where the ISA has it: GCC's and Clang's x86
builtins (``__builtin_ia32_vfmadd*``: FMA, AVX-512 with the current rounding, 4), not ``immintrin.h``,
whose parsing alone cost about 0.1 s of every compile (a third of a small kernel's). Half vectors cover
the lanes left after the full-width strips (56 lanes with 16-float vectors: 32 + 16 + 8). With AVX-512
(GCC), masked loads and stores (``pf_mload``/``pf_mstore``, ``PF_MASKED_TAILS``) cover the fewer lanes
left after the whole vectors as one vector instead: one tile shape in place of two
(``codegen/c_micro_tile.py``)."""
