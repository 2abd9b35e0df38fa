/* protocol.h: what runner.exe and direct.exe share, for onnx-gather (onnx_gather.directml.process speaks it).
 *
 * One request per line on stdin, answered by zero or more "#R info ..." lines and one final "#R ok ..." or
 * "#R error ..." line on stdout. A program starts with one reply (ok and what it says of itself, or error), serves
 * requests until "quit" or the end of stdin, and ends with "#R ok". `failure` holds the message of what went wrong,
 * for the error reply.
 */
#include <fcntl.h>
#include <io.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

static char failure[4096];

/* One protocol line; newlines inside a message become spaces so that a reply is always one line. */
static void reply(const char *kind, const char *text) {
    printf("#R %s ", kind);
    for (const char *c = text; *c; c++) putchar(*c == '\n' || *c == '\r' ? ' ' : *c);
    putchar('\n');
    fflush(stdout);
}

/* Records what went wrong in `failure`; returns -1. */
__attribute__((format(__MINGW_PRINTF_FORMAT, 1, 2))) static int fail(const char *format, ...) {
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(failure, sizeof failure, format, arguments);
    va_end(arguments);
    return -1;
}

/* Puts the formatted text in front of `failure` (where it went wrong); returns -1. */
__attribute__((format(__MINGW_PRINTF_FORMAT, 1, 2))) static int blame(const char *format, ...) {
    char text[sizeof failure];
    va_list arguments;
    va_start(arguments, format);
    int length = vsnprintf(text, sizeof text, format, arguments);
    va_end(arguments);
    if (length >= 0 && (size_t)length < sizeof text) snprintf(text + length, sizeof text - length, "%s", failure);
    memcpy(failure, text, sizeof failure);
    return -1;
}

/* A UTF-8 text as a new wide string (empty if it is not UTF-8); the caller frees it. */
static wchar_t *wide(const char *text) {
    int length = MultiByteToWideChar(CP_UTF8, 0, text, -1, NULL, 0);
    wchar_t *result = malloc(sizeof(wchar_t) * (length > 0 ? length : 1));
    if (length <= 0 || !MultiByteToWideChar(CP_UTF8, 0, text, -1, result, length)) result[0] = 0;
    return result;
}

/* fopen for a UTF-8 path. */
static FILE *open_file(const char *path, const char *mode) {
    wchar_t *name = wide(path), *how = wide(mode);
    FILE *file = _wfopen(name, how);
    free(name);
    free(how);
    return file;
}

/* stdin and stdout as bytes; 0, or 2 after replying `usage` where the program is not given exactly one argument. */
static int begin(int argc, const char *usage) {
    _setmode(_fileno(stdin), _O_BINARY);
    _setmode(_fileno(stdout), _O_BINARY);
    if (argc == 2) return 0;
    reply("error", usage);
    return 2;
}

/* Each request line (without its line break) to `handle`, which answers it and returns 1, or returns 0 for a
 * request it does not know; until "quit" or the end of stdin. */
static void serve(int (*handle)(const char *line)) {
    char line[8192];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\r\n")] = 0;
        if (strcmp(line, "quit") == 0) return;
        if (!handle(line)) reply("error", "unknown request");
    }
}
