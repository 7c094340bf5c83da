// Shared by native_decode.cpp and native_attention.cpp (each includes it into its own anonymous
// namespace): a masked score's value, which both use.

#pragma once

#include <cstdint>

namespace {

constexpr float kBlocked = -3.0e38f;  // a masked score: finite, as -ffast-math assumes

}  // namespace
