/*
 * fake_plugin_wrong_abi.c: a plugin built for a plugin ABI the core does not speak (built as
 * libfa_opencl.so in a directory of its own). The registry must refuse it before calling anything
 * in its table, and say why (the ABI versions) in fa_backend_info.
 *
 * The table is otherwise well-formed and its probe claims a device, so a registry that skipped the
 * version check would report opencl as available and the test would see it; the functions never
 * touch tensors, so even then nothing is written.
 */
#include <string.h>

#include "core/plugin.h"

#include "fake_plugin.h"

static void fake_probe(fa_plugin_probe *out) {
  memset(out, 0, sizeof *out);
  out->available = 1;
  out->device_count = 1;
  strcpy(out->devices, "fake0: this plugin should have been refused (wrong ABI)");
}

static void fake_decide(const fa_request *req, fa_decision *out) {
  (void)req;
  memset(out, 0, sizeof *out);
  strcpy(out->reason, "fake plugin: supports nothing");
}

static fa_status fake_run(const fa_request *req, const fa_decision *decision, void *workspace) {
  (void)req, (void)decision, (void)workspace;
  return fa_core_set_error(FA_ERR_INTERNAL, "fake wrong-ABI plugin ran: the registry accepted it");
}

static const fa_plugin fake_table = {
    .abi_version = FA_PLUGIN_ABI_VERSION + 1u, /* the point of this file: an unknown, newer ABI */
    .struct_size = sizeof(fa_plugin),
    .backend_id = FA_BACKEND_OPENCL,
    .name = "opencl",
    .probe = fake_probe,
    .decide = fake_decide,
    .run = fake_run,
    .release = NULL,
};

/* Returns its table whatever version the core asks for, as a careless plugin would: the core must
   not trust a plugin to check. */
FAKE_EXPORT const fa_plugin *fa_plugin_entry(uint32_t core_abi_version);
const fa_plugin *fa_plugin_entry(uint32_t core_abi_version) {
  (void)core_abi_version;
  return &fake_table;
}
