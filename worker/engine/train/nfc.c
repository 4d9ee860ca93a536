/* NFC through ICU's C API (unorm2), which works on UTF-16: the text is converted, checked,
 * normalized where it is not already, and converted back. */
#include "nfc.h"

#include <stdint.h>
#include <stdlib.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include "../../../common/error.h"
#include "bpe.h"

/* the code point that ends at s[end] (a valid UTF-8 character), and where it begins */
static int32_t prev_cp(const unsigned char *s, size_t end, size_t *begin) {
  size_t i = end - 1;
  while (i > 0 && end - i < 4 && (s[i] & 0xC0) == 0x80)
    i--;
  *begin = i;
  int32_t c = s[i];
  int k = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
  c &= k == 3 ? 0x07 : k == 2 ? 0x0F : k == 1 ? 0x1F : 0x7F;
  for (int j = 1; j <= k && i + (size_t)j < end; j++)
    c = (c << 6) | (s[i + (size_t)j] & 0x3F);
  return c;
}

int colo_nfc(const char *text, size_t n, int more, char **out, size_t *out_n, size_t *used) {
  const unsigned char *s = (const unsigned char *)text;
  UErrorCode st = U_ZERO_ERROR;
  const UNormalizer2 *nfc = unorm2_getNFCInstance(&st);
  *out = NULL;
  *out_n = 0;
  size_t end = n;
  if (more) { /* a character cut by the end waits for the rest of it */
    size_t i = n;
    while (i > 0 && n - i < 3 && (s[i - 1] & 0xC0) == 0x80)
      i--;
    if (i > 0 && s[i - 1] >= 0xC0) {
      size_t lead = i - 1, len = s[lead] >= 0xF0 ? 4 : s[lead] >= 0xE0 ? 3 : 2;
      if (n - lead < len)
        end = lead;
    }
  }
  size_t ascii = 0;
  while (ascii < end && s[ascii] < 0x80)
    ascii++;
  if (ascii == end) { /* ASCII is NFC; with more its last character may compose with what follows */
    *used = more && end > 0 ? end - 1 : end;
    return 0;
  }
  if (U_FAILURE(st) || colo_utf8_invalid(text, end) < end) {
    *used = end; /* not UTF-8: as it stands, for the encoder to name; or no ICU data */
    return 0;
  }
  /* with more, up to the last character that begins a segment: what follows it may compose */
  size_t upto = end;
  if (more) {
    upto = 0;
    for (size_t at = end; at > 0;) {
      size_t b;
      int32_t c = prev_cp(s, at, &b);
      if (unorm2_hasBoundaryBefore(nfc, c)) {
        upto = b;
        break;
      }
      at = b;
    }
  }
  *used = upto;
  if (upto <= ascii)
    return 0;
  int32_t n16 = 0;
  u_strFromUTF8(NULL, 0, &n16, text, (int32_t)upto, &st); /* the length it needs */
  st = U_ZERO_ERROR;
  UChar *src = malloc(((size_t)n16 + 1) * sizeof *src);
  if (!src)
    return COLO_ENOMEM;
  u_strFromUTF8(src, n16 + 1, NULL, text, (int32_t)upto, &st);
  int rc = 0;
  if (U_SUCCESS(st) && !unorm2_isNormalized(nfc, src, n16, &st) && U_SUCCESS(st)) {
    int32_t cap = 3 * n16 + 1, m = 0, m8 = 0;
    UChar *dst = malloc((size_t)cap * sizeof *dst);
    if (!dst)
      rc = COLO_ENOMEM;
    if (dst)
      m = unorm2_normalize(nfc, src, n16, dst, cap, &st);
    if (dst && U_SUCCESS(st))
      u_strToUTF8(NULL, 0, &m8, dst, m, &st); /* the length it needs */
    if (dst && (st == U_BUFFER_OVERFLOW_ERROR || U_SUCCESS(st))) {
      st = U_ZERO_ERROR;
      if (!(*out = malloc((size_t)m8 + 1)))
        rc = COLO_ENOMEM;
      else
        u_strToUTF8(*out, m8 + 1, NULL, dst, m, &st);
      if (rc == 0 && U_FAILURE(st)) { /* as it stands, then */
        free(*out);
        *out = NULL;
      } else if (rc == 0) {
        *out_n = (size_t)m8;
      }
    }
    free(dst);
  }
  free(src);
  return rc;
}
