// thread_stack.h - threads get the stack their creator asked for, static TLS not counted against it.
//
// glibc takes a thread's static TLS (the PT_TLS blocks of every library loaded at start) out of
// the stack size given to pthread_attr_setstacksize (glibc bug 11787). rlrun is one binary that
// links libraries with large static TLS (OpenBLAS ~60 KiB, NCCL, cudart, ...), while civetweb, the
// HTTP server under prometheus-cpp's /metrics, starts its threads with a fixed 100 KiB: left with
// ~20 KiB, its workers overflowed their stacks on a scrape and the orchestrator died (SIGSEGV).
//
// thread_stack.cc therefore interposes pthread_attr_setstacksize for the whole process (the
// executable's definition comes before libc's in symbol lookup; rlrun_common's link options export
// it) and adds this process's static TLS plus a margin for signal frames to every explicit request.
// Threads created with the default stack size (8 MiB) are not touched.
#pragma once

#include <cstddef>

namespace rlrun {

// Bytes of static TLS of the objects loaded at process start (sum of their PT_TLS segments, each
// rounded up to its alignment), measured once.
size_t static_tls_bytes();

// What an explicit stack-size request of `requested` bytes becomes: requested + static TLS + a
// margin for signal frames (AVX-512 state is several KiB), saturating.
size_t padded_stack_size(size_t requested);

// True when pthread_attr_setstacksize in this process is the padding one above (it is exported from
// the executable), false when libc's is called directly (a binary that does not export it).
bool stack_padding_active();

}  // namespace rlrun
