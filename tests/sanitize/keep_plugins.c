/* Linked into every program of the sanitizer build (MG_SANITIZE): a dlclose that keeps
 * the library mapped.
 *
 * Why: Open MPI, PMIx and hwloc dlopen plugins, allocate from them and never free, and
 * unload them before LeakSanitizer's check at exit. A leak from an unloaded plugin shows
 * as "<unknown module>", which no suppression in tests/lsan.supp can name, unless every
 * allocation is unwound through the slow DWARF unwinder down to a libmpi frame
 * (fast_unwind_on_malloc=0), which costs about 40% of the sanitizer test run. With the
 * plugins still mapped, the fast frame-pointer unwinder's first frame names the plugin.
 *
 * The executable's definition interposes libc's for every shared library (the link
 * exports it: --export-dynamic-symbol=dlclose). Never unloading costs a few MB of
 * mappings for the process lifetime; no test depends on a library going away. */
#include <stddef.h>

int dlclose(void *handle);

int dlclose(void *handle)
{
    return handle ? 0 : 1; /* dlclose(NULL) is an error in glibc too */
}
