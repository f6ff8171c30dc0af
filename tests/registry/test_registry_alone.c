/* The registry without the core: this program is linked from
 * registry's objects and the C library only, never libdevbuf, so a call from
 * registry/ up into core/ (devbuf_init, the plugin records, any runtime
 * function) fails its link. It then drives the registry the way the core
 * does: interning and claiming identifiers, adding and removing a plugin's
 * dtype namespaces, and parsing formats that use them. */
#include <string.h>

#include "devbuf/format.h"
#include "devbuf/runtime.h"
#include "devbuf_test.h"
#include "registry.h"

static void test_identifiers(void) {
  devbuf_error err;
  CHECK(devbuf_identifier_check("alone.dev", &err) == DEVBUF_OK, "%s", err.message);
  CHECK(devbuf_identifier_check("alone:1", &err) == DEVBUF_EINVAL, "':' refused");
  CHECK(devbuf__ident_count() == 0, "nothing claimed yet");
  const char *a = devbuf__intern("alone.dev");
  CHECK(a != NULL && devbuf__intern("alone.dev") == a, "interned once");
  CHECK(devbuf__ident_find("alone.dev", NULL, NULL) == DEVBUF_ENOTFOUND, "unclaimed");
  size_t owner = 99;
  CHECK(devbuf__ident_claim(a, 7, &owner) == DEVBUF_OK, "claim");
  CHECK(devbuf__ident_claim(a, 8, &owner) == DEVBUF_EEXIST && owner == 7, "second claim");
  const char *in = NULL;
  CHECK(devbuf__ident_find("alone.dev", &in, &owner) == DEVBUF_OK && in == a && owner == 7,
        "found");
  CHECK(devbuf__ident_count() == 1, "one claimed");
  CHECK(devbuf__ident_get(0, &owner) == a && owner == 7, "listed");
  CHECK(devbuf__ident_get(1, NULL) == NULL, "past the end");
  devbuf__ident_release_owner(7);
  CHECK(devbuf__ident_find("alone.dev", NULL, NULL) == DEVBUF_ENOTFOUND, "released");
  CHECK(devbuf__ident_count() == 0, "none claimed");
}

static int two_bytes(void *ctx, const char *p, size_t n, devbuf_dtype_desc *out,
                     devbuf_error *err) {
  (void)ctx, (void)p, (void)n, (void)err;
  out->kind = DEVBUF_KIND_UINT;
  out->itemsize = 2;
  out->alignment = 2;
  out->bits = 16;
  snprintf(out->canonical, sizeof out->canonical, "u16");
  return DEVBUF_OK;
}

static const devbuf_dtype_namespace NS_ALONE = {
    sizeof(devbuf_dtype_namespace), 0, "alone", "devbuf-tests", "test", two_bytes, NULL};
static const devbuf_dtype_namespace *const PROVIDED[] = {&NS_ALONE, NULL};
static devbuf__dtype_provider g_provider;

static void test_providers(void) {
  devbuf_error err;
  uint64_t size = 0;
  const char *fmt = "<[alone$x]i";
  size_t base = devbuf__dtype_namespace_count(); /* struct, buffer, devbuf */
  CHECK(base == 3, "%zu namespaces before any provider", base);
  CHECK(devbuf__format_itemsize(fmt, strlen(fmt), 0, &size, NULL, NULL, &err) ==
            DEVBUF_ENOTFOUND, "unknown before the provider is added");
  devbuf__dtype_provider_add(&g_provider, 3, "alone-plugin", PROVIDED);
  CHECK_OK(devbuf__format_itemsize(fmt, strlen(fmt), 0, &size, NULL, NULL, &err), &err);
  CHECK(size == 6, "itemsize %llu", (unsigned long long)size);
  CHECK(devbuf__format_itemsize(fmt, strlen(fmt), DEVBUF_FORMAT_NO_PLUGINS, &size, NULL, NULL,
                                &err) == DEVBUF_ENOTFOUND, "NO_PLUGINS skips providers");
  const devbuf_dtype_namespace *ns = NULL;
  const char *source = NULL;
  CHECK_OK(devbuf__dtype_lookup("alone", (size_t)-1, &ns, &source, &err), &err);
  CHECK(ns == &NS_ALONE && source != NULL && strcmp(source, "alone-plugin") == 0, "lookup");
  CHECK(devbuf__dtype_namespace_count() == base + 1, "listed");
  CHECK(devbuf__dtype_register(&NS_ALONE, &err) == DEVBUF_EEXIST, "a provider's id is taken");
  CHECK_HAS(err.message, "alone-plugin");
  devbuf__dtype_provider_remove(3);
  CHECK(devbuf__dtype_lookup("alone", (size_t)-1, &ns, NULL, &err) == DEVBUF_ENOTFOUND,
        "gone with its plugin");
  CHECK(devbuf__dtype_namespace_count() == base, "no longer listed");
}

static void test_builtin_format(void) {
  devbuf_error err;
  devbuf_format f = DEVBUF_FORMAT_INIT;
  const char *fmt = "<h[devbuf$bfloat16]";
  CHECK_OK(devbuf__format_parse(fmt, strlen(fmt), 0, &f, &err), &err);
  CHECK(f.itemsize == 4, "itemsize %llu", (unsigned long long)f.itemsize);
  devbuf_format_release(&f);
}

int main(void) {
  RUN(test_identifiers);
  RUN(test_providers);
  RUN(test_builtin_format);
  return devbuf_test_finish();
}
