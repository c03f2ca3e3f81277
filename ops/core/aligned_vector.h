// std::vector whose storage starts on a 64-byte boundary (a cache line, a zmm register, an AMX
// tile row): the GEMM's packed weights and its im2col, accumulator and staging buffers.  With
// malloc's 16-byte alignment a 64-byte weight quad row or tile row straddles two cache lines;
// the AMX tile loads then run at about half speed (bench/npu_kernels.py --paths amx).
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace ratelnn {

template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, std::size_t) { ::operator delete(p, kAlign); }
  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const { return true; }
  template <typename U>
  bool operator!=(const CacheLineAllocator<U>&) const { return false; }
};

template <typename T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace ratelnn
