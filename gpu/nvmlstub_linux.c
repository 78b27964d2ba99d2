//go:build linux && (amd64 || arm64)

// Dispatch stubs for every NVML function go-nvml's bindings call.
//
// go-nvml links its calls against symbols it leaves undefined
// (-Wl,--unresolved-symbols=ignore-in-object-files) and relies on lazy
// binding to find them in the libnvidia-ml.so it dlopens in Init. Under
// LD_BIND_NOW=1 (or a -z now link) the loader resolves them at start and
// kills the process when the library is absent; a call after a failed
// Init does the same. Here each one is defined, hidden (so neither the
// loader nor the library sees it), as a jump through gpu_nvml_tab. Every
// slot starts at a function that answers NVML_ERROR_FUNCTION_NOT_FOUND,
// and gpu_nvml_bind fills the slots from the library with dlsym before
// go-nvml's Init runs. A function the installed driver lacks keeps the
// fallback instead of killing the process.
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "nvml_syms.h" // GPU_NVML_NSYMS only: X is not defined yet

static int gpu_nvml_absent(void) { return 13; /* NVML_ERROR_FUNCTION_NOT_FOUND */ }
static const char *gpu_nvml_absent_str(int r) {
	(void)r;
	return "NVML library not loaded";
}

#undef X
#undef XS
#define X(i, n) [i] = (void *)gpu_nvml_absent,
#define XS(i, n) [i] = (void *)gpu_nvml_absent_str,
__attribute__((visibility("hidden"))) void *gpu_nvml_tab[GPU_NVML_NSYMS] = {
#include "nvml_syms.h"
};
#undef X
#undef XS

#define X(i, n) #n,
#define XS(i, n) #n,
static const char *const gpu_nvml_names[GPU_NVML_NSYMS] = {
#include "nvml_syms.h"
};
#undef X
#undef XS

// One stub: a tail jump, so arguments and the return value pass untouched.
// On arm64 it goes through x16, the scratch register the AAPCS64 leaves to
// veneers between a call and its target.
#if defined(__x86_64__)
#define GPU_STUB_JUMP(i) "\tjmp *gpu_nvml_tab+8*" #i "(%rip)\n"
#elif defined(__aarch64__)
#define GPU_STUB_JUMP(i)                                                 \
	"\tadrp x16, gpu_nvml_tab+8*" #i "\n"                            \
	"\tldr x16, [x16, :lo12:gpu_nvml_tab+8*" #i "]\n"                \
	"\tbr x16\n"
#else
#error "NVML stubs: only amd64 and arm64 (see bind_other.go)"
#endif
#define GPU_STUB(i, n)                                                   \
	__asm__(".text\n"                                                \
		".globl " #n "\n"                                        \
		".hidden " #n "\n"                                       \
		".type " #n ", %function\n"                              \
		".p2align 4\n" #n ":\n"                                  \
		GPU_STUB_JUMP(i)                                         \
		".size " #n ", .-" #n "\n");
#define X(i, n) GPU_STUB(i, n)
#define XS(i, n) GPU_STUB(i, n)
#include "nvml_syms.h"
#undef X
#undef XS

// gpu_nvml_bind opens the library (the handle is kept: the slots point
// into it) and fills every slot it exports. It returns the number of
// symbols found, or -1 with dlerror's text in err.
int gpu_nvml_bind(const char *path, char *err, int errlen) {
	void *h = dlopen(path, RTLD_LAZY | RTLD_GLOBAL);
	if (h == NULL) {
		const char *e = dlerror();
		snprintf(err, (size_t)errlen, "%s", e ? e : "dlopen failed");
		return -1;
	}
	int found = 0;
	for (int i = 0; i < GPU_NVML_NSYMS; i++) {
		void *p = dlsym(h, gpu_nvml_names[i]);
		if (p != NULL) {
			gpu_nvml_tab[i] = p;
			found++;
		}
	}
	return found;
}

int gpu_nvml_stubs(void) { return GPU_NVML_NSYMS; }
