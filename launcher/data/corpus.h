/* corpus.h — the default training corpus. */
#ifndef TL_LAUNCHER_DATA_CORPUS_H
#define TL_LAUNCHER_DATA_CORPUS_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The default corpus: the English text of Debian's `fortunes` package
 * (/usr/share/games/fortunes), every plain-text file in name order with the
 * '%' separator lines removed, split into train (first 90%) and validation
 * (last 10%) at a line boundary, byte-tokenized. */
#define TL_CORPUS_DIR "/usr/share/games/fortunes"

/* The corpus's text (malloc'd, the caller's) and where validation begins. */
tl_status tl_corpus_text(char** text, size_t* len, size_t* split);
tl_status tl_corpus_build(const char* train_path, const char* val_path, int64_t* n_train,
                          int64_t* n_val);

#ifdef __cplusplus
}
#endif

#endif
