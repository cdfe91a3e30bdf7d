/*
 * fake_plugin_no_entry.c: a shared object that loads fine but is not a flashattn plugin: it has no
 * fa_plugin_entry symbol (built as libfa_hip.so). The registry must report the missing entry point
 * as the reason hip is unavailable, not crash or fall back to another file.
 *
 * It exports a near-miss name on purpose, so the test also shows the lookup is by exact symbol.
 */
#include "fake_plugin.h"

FAKE_EXPORT int fa_plugin_entry_v0(void);
int fa_plugin_entry_v0(void) { return 42; }
