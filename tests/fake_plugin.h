/*
 * fake_plugin.h: what the test plugins (tests/fake_plugin_*.c) share. Plugins are built with
 * hidden visibility by default; the symbols the registry looks up must be exported.
 */
#ifndef FA_TESTS_FAKE_PLUGIN_H
#define FA_TESTS_FAKE_PLUGIN_H

#if defined(__GNUC__)
#define FAKE_EXPORT __attribute__((visibility("default")))
#else
#define FAKE_EXPORT
#endif

#endif /* FA_TESTS_FAKE_PLUGIN_H */
