// The AVX-512 intrinsics for the *_avx512.cpp files (include this instead of
// <immintrin.h>). GCC 12's AVX-512 headers build their "undefined" vectors as
// `__m512i __Y = __Y;`, which -Wuninitialized reports once inlined (GCC bug
// 105593, fixed in GCC 13); the warnings are silenced for these files only.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
