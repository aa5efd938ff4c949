// CpuRelax: the pause a spinning thread makes between two looks at a word another core writes.
// Why: on a core shared with a hyperthread it hands the sibling the pipeline, and it keeps the
// spin from flooding the memory system with speculative loads.
#pragma once

namespace braid {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace braid
