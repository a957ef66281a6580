/* Which OpenCL implementation a device belongs to, and the choice of a device from a
 * --device / CLMOE_DEVICE spec (rules in order: P:D indices, a device type, an
 * implementation name, a platform string, a device name or vendor). */
#include "clmoe/runtime.h"
#include "internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int clmoe__contains_nocase(const char *hay, const char *needle)
{
  size_t n = strlen(needle);
  if (n == 0) return 1;
  for (; *hay; hay++) {
    size_t i = 0;
    while (i < n && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
      i++;
    if (i == n) return 1;
  }
  return 0;
}

/* 1 when `word` occurs in hay (any case) with no letter or digit on either side. */
static int has_word(const char *hay, const char *word)
{
  size_t n = strlen(word);
  for (const char *p = hay; *p; p++) {
    if (strncasecmp(p, word, n) != 0) continue;
    int starts = p == hay || !isalnum((unsigned char)p[-1]);
    if (starts && !isalnum((unsigned char)p[n])) return 1;
  }
  return 0;
}

/* ---- the implementation behind a device ---- */

/* Per implementation: its title, its short name, then aliases. */
static const struct impl_names {
  clmoe_impl impl;
  const char *title;
  const char *names[3];
} impl_table[] = {
  {CLMOE_IMPL_POCL, "PoCL", {"pocl", "portable"}},
  {CLMOE_IMPL_INTEL, "Intel OpenCL", {"intel", "oneapi"}},
  {CLMOE_IMPL_NVIDIA, "NVIDIA CUDA", {"nvidia", "cuda"}},
  {CLMOE_IMPL_AMD, "AMD ROCm", {"amd", "rocm"}},
  {CLMOE_IMPL_OCLGRIND, "Oclgrind", {"oclgrind"}},
  {CLMOE_IMPL_RUSTICL, "Mesa rusticl", {"rusticl"}},
  {CLMOE_IMPL_CLOVER, "Mesa Clover", {"clover"}},
  {CLMOE_IMPL_CLVK, "clvk", {"clvk"}},
  {CLMOE_IMPL_APPLE, "Apple", {"apple"}},
  {CLMOE_IMPL_ARM, "Arm Mali", {"arm", "mali"}},
  {CLMOE_IMPL_QUALCOMM, "Qualcomm Adreno", {"qualcomm", "adreno"}},
};
#define IMPL_COUNT (sizeof impl_table / sizeof impl_table[0])

static const struct impl_names *impl_entry(clmoe_impl impl)
{
  static const struct impl_names other = {CLMOE_IMPL_OTHER, "an unidentified implementation",
                                          {"other"}};
  for (size_t i = 0; i < IMPL_COUNT; i++)
    if (impl_table[i].impl == impl) return &impl_table[i];
  return &other;
}

const char *clmoe_impl_name(clmoe_impl impl) { return impl_entry(impl)->names[0]; }
const char *clmoe_impl_title(clmoe_impl impl) { return impl_entry(impl)->title; }

int clmoe_impl_parse(const char *name, clmoe_impl *impl)
{
  for (size_t i = 0; name && i < IMPL_COUNT; i++)
    for (size_t k = 0; k < 3 && impl_table[i].names[k]; k++)
      if (!strcasecmp(name, impl_table[i].names[k])) {
        if (impl) *impl = impl_table[i].impl;
        return 1;
      }
  return 0;
}

/* Kept equal to impl_table by test_runtime (every name parses, every entry is listed). */
const char *clmoe_impl_names(void)
{
  return "pocl|portable, intel|oneapi, nvidia|cuda, amd|rocm, oclgrind, rusticl, clover, clvk, "
         "apple, arm|mali, qualcomm|adreno";
}

clmoe_impl clmoe_impl_identify(const char *name, const char *vendor, const char *version,
                               const char *suffix)
{
  name = name ? name : "", vendor = vendor ? vendor : "";
  version = version ? version : "", suffix = suffix ? suffix : "";
  /* First those that run on other makers' hardware (and may carry their names); rusticl
   * and Clover share the ICD suffix MESA, only their platform names tell them apart. */
  if (clmoe__contains_nocase(name, "oclgrind") || !strcasecmp(suffix, "oclg")) return CLMOE_IMPL_OCLGRIND;
  if (clmoe__contains_nocase(name, "portable computing language") || clmoe__contains_nocase(name, "pocl") ||
      clmoe__contains_nocase(vendor, "pocl") || clmoe__contains_nocase(version, "pocl") ||
      !strcasecmp(suffix, "POCL"))
    return CLMOE_IMPL_POCL;
  if (clmoe__contains_nocase(name, "rusticl")) return CLMOE_IMPL_RUSTICL;
  if (clmoe__contains_nocase(name, "clover")) return CLMOE_IMPL_CLOVER;
  if (clmoe__contains_nocase(name, "clvk") || !strcasecmp(suffix, "clvk")) return CLMOE_IMPL_CLVK;
  /* The vendors' own drivers: by ICD suffix, else by the platform's vendor or name. */
  if (!strcasecmp(suffix, "INTEL")) return CLMOE_IMPL_INTEL;
  if (!strcasecmp(suffix, "NV")) return CLMOE_IMPL_NVIDIA;
  if (!strcasecmp(suffix, "AMD")) return CLMOE_IMPL_AMD;
  if (clmoe__contains_nocase(vendor, "intel") || clmoe__contains_nocase(name, "intel")) return CLMOE_IMPL_INTEL;
  if (clmoe__contains_nocase(vendor, "nvidia") || clmoe__contains_nocase(name, "nvidia")) return CLMOE_IMPL_NVIDIA;
  if (clmoe__contains_nocase(vendor, "advanced micro devices") || has_word(vendor, "amd") ||
      has_word(name, "amd"))
    return CLMOE_IMPL_AMD;
  if (has_word(vendor, "apple") || has_word(name, "apple")) return CLMOE_IMPL_APPLE;
  if (has_word(vendor, "arm") || has_word(name, "arm") || clmoe__contains_nocase(name, "mali"))
    return CLMOE_IMPL_ARM;
  if (clmoe__contains_nocase(vendor, "qualcomm") || clmoe__contains_nocase(name, "qualcomm"))
    return CLMOE_IMPL_QUALCOMM;
  return CLMOE_IMPL_OTHER;
}

clmoe_impl clmoe_device_impl(const clmoe_device_caps *c)
{
  if (c->impl != CLMOE_IMPL_OTHER) return c->impl;
  return clmoe_impl_identify(c->platform_name, c->platform_vendor, c->platform_version,
                             c->icd_suffix);
}

static int parse_index_pair(const char *spec, int *p, int *d)
{
  char tail;
  return sscanf(spec, "%d:%d%c", p, d, &tail) == 2;
}

/* Rules 4 and 5: the first device with spec in one of its platform's strings, else in its
 * own name or vendor. */
static int substring_match(const clmoe_device_caps *list, int count, const char *spec,
                           const char **field)
{
  for (int i = 0; i < count; i++) {
    const clmoe_device_caps *c = &list[i];
    const char *const plat[4] = {c->platform_name, c->platform_vendor, c->platform_version,
                                 c->icd_suffix};
    static const char *const names[4] = {"platform name", "platform vendor", "platform version",
                                         "ICD suffix"};
    for (int k = 0; k < 4; k++)
      if (clmoe__contains_nocase(plat[k], spec)) {
        *field = names[k];
        return i;
      }
  }
  for (int i = 0; i < count; i++) {
    if (clmoe__contains_nocase(list[i].device_name, spec)) return *field = "device name", i;
    if (clmoe__contains_nocase(list[i].vendor_name, spec)) return *field = "device vendor", i;
  }
  return -1;
}

/* A word of list[target]'s name that picks it by rules 4-5, else 0. */
static int picking_word(const clmoe_device_caps *list, int count, int target, char *word, size_t len)
{
  const char *p = list[target].device_name, *field;
  while (*p) {
    size_t n = 0;
    while (p[n] && isalnum((unsigned char)p[n])) n++;
    if (n >= 3 && n < len) {
      memcpy(word, p, n);
      word[n] = '\0';
      if (!clmoe_impl_parse(word, NULL) && strcasecmp(word, "gpu") &&
          strcasecmp(word, "cpu") && strcasecmp(word, "accelerator") &&
          substring_match(list, count, word, &field) == target)
        return 1;
    }
    p += n ? n : 1;
  }
  return 0;
}

/* Rule 3 found no device: list those there are, and how to pick one named like spec. */
static clmoe_status impl_missing(const clmoe_device_caps *list, int count, const char *source,
                                 const char *spec, clmoe_impl want)
{
  char found[2048] = "";
  size_t used = 0;
  int named = -1; /* the first device whose name or vendor contains spec */
  for (int i = 0; i < count; i++) {
    const clmoe_device_caps *c = &list[i];
    if (named < 0 && (clmoe__contains_nocase(c->device_name, spec) || clmoe__contains_nocase(c->vendor_name, spec)))
      named = i;
    int w = snprintf(found + used, sizeof found - used, "%s%s [%d:%d] %s", i ? ", " : "",
                     clmoe_impl_title(clmoe_device_impl(c)), c->platform_index, c->device_index,
                     c->device_name);
    if (w < 0 || (size_t)w >= sizeof found - used) break;
    used += (size_t)w;
  }
  char hint[512] = "", word[64], alt[96] = "";
  if (named >= 0) {
    const clmoe_device_caps *c = &list[named];
    if (picking_word(list, count, named, word, sizeof word))
      snprintf(alt, sizeof alt, " or %s=%s", source, word);
    snprintf(hint, sizeof hint, " - \"%s\" names an implementation, so it never matches another "
             "one's device by its name: for %s [%d:%d] %s use %s=%d:%d%s", spec,
             clmoe_impl_title(clmoe_device_impl(c)), c->platform_index, c->device_index,
             c->device_name, source, c->platform_index, c->device_index, alt);
  }
  return clmoe__error(CLMOE_ERR_NO_DEVICE, "%s=%s: no %s platform (is its driver installed, with "
                      "an .icd file in /etc/OpenCL/vendors or OCL_ICD_VENDORS?); found %s%s",
                      source, spec, clmoe_impl_title(want), found, hint);
}

clmoe_status clmoe_device_choose(const clmoe_device_caps *list, int count, const char *spec,
                                 int *chosen, char *why, size_t why_len)
{
  char scratch[256];
  if (!why) why = scratch, why_len = sizeof scratch;
  const char *source = "--device";
  if (!spec || !*spec) {
    clmoe_status st;
    spec = clmoe__knob_getenv(CLMOE_K_DEVICE, &st);
    source = "CLMOE_DEVICE";
    if (st != CLMOE_OK) return st;
  }
  if (count <= 0) return clmoe__error(CLMOE_ERR_NO_DEVICE, "no OpenCL device to choose from");
  if (!spec || !*spec) {
    /* A simulator (Oclgrind calls its device a GPU) is never the default: only asked for. */
    for (int i = 0; i < count; i++)
      if (list[i].is_gpu && clmoe_device_impl(&list[i]) != CLMOE_IMPL_OCLGRIND) {
        *chosen = i;
        snprintf(why, why_len, "default: the first GPU");
        return CLMOE_OK;
      }
    for (int i = 0; i < count; i++)
      if (list[i].is_cpu && clmoe_device_impl(&list[i]) != CLMOE_IMPL_OCLGRIND) {
        *chosen = i;
        snprintf(why, why_len, "default: no GPU found, the first CPU device");
        return CLMOE_OK;
      }
    *chosen = 0;
    snprintf(why, why_len, "default: no GPU or CPU device, the first device");
    return CLMOE_OK;
  }
  int p, d;
  if (parse_index_pair(spec, &p, &d)) { /* rule 1 */
    for (int i = 0; i < count; i++)
      if (list[i].platform_index == p && list[i].device_index == d) {
        *chosen = i;
        snprintf(why, why_len, "%s=%s: platform %d, device %d", source, spec, p, d);
        return CLMOE_OK;
      }
    return clmoe__error(CLMOE_ERR_NO_DEVICE, "%s=%s: there is no device %d on platform %d "
                        "(clmoe-info lists them)", source, spec, d, p);
  }
  int want_gpu = !strcasecmp(spec, "gpu");
  int want_cpu = !strcasecmp(spec, "cpu");
  int want_acc = !strcasecmp(spec, "accelerator");
  if (want_gpu || want_cpu || want_acc) { /* rule 2 */
    for (int i = 0; i < count; i++)
      if (want_gpu ? list[i].is_gpu : want_cpu ? list[i].is_cpu : list[i].is_accelerator) {
        *chosen = i;
        snprintf(why, why_len, "%s=%s: the first device of that type", source, spec);
        return CLMOE_OK;
      }
    return clmoe__error(CLMOE_ERR_NO_DEVICE, "%s=%s: there is no device of that type "
                        "(clmoe-info lists the devices)", source, spec);
  }
  clmoe_impl impl;
  if (clmoe_impl_parse(spec, &impl)) { /* rule 3 */
    for (int i = 0; i < count; i++)
      if (clmoe_device_impl(&list[i]) == impl) {
        *chosen = i;
        snprintf(why, why_len, "%s=%s: the first device of the %s implementation", source,
                 spec, clmoe_impl_title(impl));
        return CLMOE_OK;
      }
    return impl_missing(list, count, source, spec, impl);
  }
  const char *field = NULL;
  int i = substring_match(list, count, spec, &field); /* rules 4 and 5 */
  if (i >= 0) {
    *chosen = i;
    snprintf(why, why_len, "%s=%s: the first device whose %s contains it", source, spec, field);
    return CLMOE_OK;
  }
  return clmoe__error(CLMOE_ERR_NO_DEVICE,
                      "%s=%s matches no device (use P:D indices, gpu, cpu, accelerator, an "
                      "implementation - %s - or part of a platform's name, vendor, version or ICD "
                      "suffix, or of a device's name or vendor; clmoe-info lists them)", source, spec, clmoe_impl_names());
}
