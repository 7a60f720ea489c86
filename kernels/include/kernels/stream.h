// How the decode kernels stream weights from memory: a choice that depends on
// the microarchitecture and the size of its caches, so it is made at run time
// per CPU (the engine times both at model load, engine/model.h), never fixed
// to the machine it was tuned on.
//
//   kNonTemporal: weight lines read once per pass are prefetched
//       non-temporal (prefetchnta): they do not push the KV cache and the
//       activations out of the caches. Best where the weights are much larger
//       than the last-level cache (they would be evicted before the next
//       token anyway).
//   kTemporal: ordinary prefetches (prefetcht0). Best where the weights fit
//       in the last-level cache: a non-temporal line is not kept there, so
//       every token reads the whole model from memory again.
//
// Either way the prefetches run kDecodePrefetchBytes ahead of the row being
// read, and results are bit for bit the same (a prefetch changes no value).
#pragma once

#include <string_view>

namespace braid::kernels {

enum class StreamVariant { kNonTemporal, kTemporal };

// "nt" or "t0".
const char* StreamVariantName(StreamVariant v);
// "nt" / "t0" -> the variant; false for anything else.
bool ParseStreamVariant(std::string_view name, StreamVariant* v);

// The variant in use, for every thread (kNonTemporal until set).
StreamVariant CurrentStreamVariant();
void SetStreamVariant(StreamVariant v);

}  // namespace braid::kernels
