/* json_kind.h — what kind of JSON value a reader found, in words for an error
 * message ("a string", "an integer", ...). Shared by every JSON reader
 * (the training config, the planner's cluster specs). */
#ifndef TL_CORE_JSON_KIND_H
#define TL_CORE_JSON_KIND_H

#include <jansson.h>

#ifdef __cplusplus
extern "C" {
#endif

const char* tl_json_kind(const json_t* v);

#ifdef __cplusplus
}
#endif

#endif
