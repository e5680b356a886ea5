/* inputs.h — every file a training config names, opened and checked the way
 * training will read it, before any rank starts.
 *
 * `trellis check CONFIG.json` and a hand-started `trellis train` call it, so
 * a missing data file, a token beyond the vocabulary, a model file or
 * checkpoint of another shape is refused once, by name, instead of by every
 * rank of a job that already started. */
#ifndef TL_LAUNCHER_INPUTS_H
#define TL_LAUNCHER_INPUTS_H

#include "core/config.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Checks data.train (required), data.val, model.init_from and
 * checkpoint.resume: each must open, have the right header and size, and
 * (token files) hold only tokens below model.vocab_size and enough of them
 * for one batch. Every problem is reported at once, one line each, starting
 * with the field; TL_ERR_CONFIG (or the first file's status) otherwise. */
tl_status tl_inputs_check(const struct tl_config* cfg);

#ifdef __cplusplus
}
#endif

#endif
