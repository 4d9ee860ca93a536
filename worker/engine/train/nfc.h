/* Unicode normalization form C (NFC) of UTF-8 text, for tokenizers whose normalizer is NFC
 * (Qwen2's tokenizer.json): through ICU (libicu), whose Normalizer2 is the Unicode standard's
 * algorithm, as HuggingFace's tokenizers apply it (the unicode-normalization crate). */
#ifndef COLO_NFC_H
#define COLO_NFC_H

#include <stddef.h>

/* NFC of text[0, *used): with `more` (text may follow n), *used is where the last character that
 * begins a normalization segment starts (the text after it may still compose with what follows,
 * "e" then U+0301), else n. *out is the normalized text (malloc'd, *out_n bytes), or NULL when it
 * is text[0, *used) as it stands (ASCII, and any text already in NFC). Text that is not valid
 * UTF-8 is left as it stands too (*out NULL; the encoder names its first bad byte). Returns 0, or
 * COLO_ENOMEM. NFC lengthens UTF-8 by at most 3 times. */
int colo_nfc(const char *text, size_t n, int more, char **out, size_t *out_n, size_t *used);

#endif
