// Interposes pthread_attr_setstacksize: see thread_stack.h for why.
#include "common/observe/thread_stack.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>

#include <cerrno>
#include <limits>

namespace rlrun {
namespace {

// Signal delivery on a thread writes the full register state (xsave: ~2.7 KiB with AVX-512, more
// with AMX) on its stack, and a few nested libc frames need room beyond their creator's estimate.
constexpr size_t kSignalMargin = 64 * 1024;

using SetStackSize = int (*)(pthread_attr_t*, size_t);

SetStackSize libc_setstacksize() {
  static const SetStackSize real =
      reinterpret_cast<SetStackSize>(::dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  return real;
}

int add_tls_segment(dl_phdr_info* info, size_t, void* total) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_TLS) continue;
    const size_t align = ph.p_align > 1 ? ph.p_align : 1;
    *static_cast<size_t*>(total) += (ph.p_memsz + align - 1) / align * align;
  }
  return 0;
}

}  // namespace

size_t static_tls_bytes() {
  static const size_t bytes = [] {
    size_t total = 0;
    ::dl_iterate_phdr(add_tls_segment, &total);
    return total;
  }();
  return bytes;
}

size_t padded_stack_size(size_t requested) {
  const size_t extra = static_tls_bytes() + kSignalMargin;
  return requested > std::numeric_limits<size_t>::max() - extra ? requested : requested + extra;
}

bool stack_padding_active() {
  return ::dlsym(RTLD_DEFAULT, "pthread_attr_setstacksize") ==
         reinterpret_cast<void*>(&::pthread_attr_setstacksize);
}

}  // namespace rlrun

// The interposer. Called by any library in the process (civetweb, libgomp with OMP_STACKSIZE, ...).
extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t stacksize) {
  const rlrun::SetStackSize real = rlrun::libc_setstacksize();
  if (real == nullptr) return ENOSYS;  // cannot happen with glibc; never recurse into ourselves
  return real(attr, rlrun::padded_stack_size(stacksize));
}
