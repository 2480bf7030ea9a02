/* libFuzzer harness: timing cache parsing (src/build/tactics.c): the document's entries, and the
 * tactic each entry would select. */
#include "fuzz_common.h"
#include "build/build.h"
#include <jansson.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init();
    json_t *entries = kiln__timing_cache_parse((const char *)data, size);
    const char *key;
    json_t *val;
    json_object_foreach(entries, key, val) {
        const char *t = kiln__timing_cache_tactic(entries, key);
        if (t && strcmp(t, "mt") && strcmp(t, "st"))
            abort();   /* only kiln's own tactic names may come out of a cache */
    }
    json_decref(entries);
    kiln_clear_last_error();
    return 0;
}
