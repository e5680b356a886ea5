/* rope.c — RoPE's frequencies, once, for every backend. Each step is the
 * float32 operation transformers performs (its default and "llama3" rope
 * initialisations), so that the rotations agree with a Hugging Face model's
 * to the rounding of cos and sin. */
#include <math.h>

#include "kernels/ops.h"

void tl_rope_inv_freq(const struct tl_rope* r, float* inv_freq) {
  const int half = r->hs / 2;
  for (int i = 0; i < half; i++) inv_freq[i] = 1.0f / powf(r->theta, (float)(2 * i) / (float)r->hs);
  if (!(r->factor > 0)) return;
  const float factor = r->factor, low = r->low_freq_factor;
  const float old_ctx = (float)r->original_ctx;
  const float low_wavelen = (float)((double)r->original_ctx / r->low_freq_factor);
  const float high_wavelen = (float)((double)r->original_ctx / r->high_freq_factor);
  const float span = (float)((double)r->high_freq_factor - r->low_freq_factor);
  for (int i = 0; i < half; i++) {
    const float f = inv_freq[i];
    const float wavelen = (float)(2.0 * M_PI) / f;
    if (wavelen > low_wavelen) { /* long waves: slowed by the factor */
      inv_freq[i] = f / factor;
    } else if (!(wavelen < high_wavelen)) { /* between: interpolated */
      const float smooth = (old_ctx / wavelen - low) / span;
      inv_freq[i] = (1.0f - smooth) * f / factor + smooth * f;
    }
  }
}
