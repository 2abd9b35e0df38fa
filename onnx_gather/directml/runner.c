/* runner.exe: ONNX Runtime's DirectML execution provider, driven through ONNX Runtime's C API, for onnx-gather.
 *
 * Built for Windows (mingw-w64) by `onnx-gather setup-directml` and run under Wine by onnx_gather.directml.worker.
 * One process serves a whole batch of requests, framed as protocol.h says. Tensors travel as tensor files.
 *
 *   load <mode 0|1|2> <model path>     -> info input <k> <name>, info output <k> <name>,
 *                                         with modes 1 and 2: info placement <ONNX Runtime's placement log line>;
 *                                         ok <session id>. Mode 0: DirectML only; 1: nodes DirectML cannot take
 *                                         fall back to the CPU provider; 2: as 1, with DirectML's graph fusion
 *                                         off, so that the placement lists every node by its name
 *   save <path>                        -> ok; the next load writes ONNX Runtime's optimized model to <path> (ONNX
 *                                         Runtime then leaves DirectML's graph fusion off, as in mode 2)
 *   run <session id> <folder>          -> reads <folder>/in<k>.tensor for every input k, writes <folder>/out<k>.tensor,
 *                                         or says info absent <k> where ONNX Runtime returned no tensor for output k
 *   free <session id>                  -> ok
 *   caps                               -> ok shader_model <m.n> wave_ops <0|1> int64_ops <0|1> native16 <0|1>:
 *                                         what the Direct3D 12 device DirectML runs on offers
 *   quit                               -> ok, then the process ends
 *
 * A tensor file (onnx_gather/directml/tensors.py writes and reads them): the magic "OGTENSOR", the ONNX element type
 * (int32), the dimension count (int32), the dims (int64 each), then the elements. STRING: each element's length in
 * bytes (uint64 each), then the elements' bytes one after the other (NUL bytes are bytes like any other); every other
 * type: the elements in C order as ONNX Runtime holds them (INT4, UINT4 and FLOAT4E2M1 two to a byte, INT2 and UINT2
 * four, from the low bits). All little-endian.
 *
 * The OrtApi functions are called by their position in the table (onnxruntime_c_api.h): the table only grows at
 * its end, so these positions hold for every later ONNX Runtime.
 */
#define COBJMACROS
#define INITGUID
#include <d3d12.h>
#include <stdint.h>

#include "protocol.h"

typedef struct OrtStatus OrtStatus;
typedef void *Ort; /* every other ONNX Runtime object is opaque here */
typedef OrtStatus *(*Fn)();
typedef void (*LogFn)(void *param, int severity, const char *category, const char *logid, const char *where,
                      const char *message);
typedef struct {
    const void *(*GetApi)(uint32_t version);
    const char *(*GetVersionString)(void);
} OrtApiBase;

enum {
    GET_ERROR_MESSAGE = 2, CREATE_ENV_WITH_CUSTOM_LOGGER = 4, CREATE_SESSION = 7, RUN = 9,
    CREATE_SESSION_OPTIONS = 10, SET_OPTIMIZED_MODEL_FILE_PATH = 11, SET_SESSION_EXECUTION_MODE = 13, DISABLE_MEM_PATTERN = 17,
    SET_SESSION_LOG_SEVERITY_LEVEL = 22, SESSION_GET_INPUT_COUNT = 30, SESSION_GET_OUTPUT_COUNT = 31,
    SESSION_GET_INPUT_NAME = 36, SESSION_GET_OUTPUT_NAME = 37, CREATE_TENSOR_AS_ORT_VALUE = 48, IS_TENSOR = 50,
    GET_TENSOR_MUTABLE_DATA = 51, GET_STRING_TENSOR_DATA_LENGTH = 53, GET_STRING_TENSOR_CONTENT = 54,
    GET_TENSOR_ELEMENT_TYPE = 60, GET_DIMENSIONS_COUNT = 61, GET_DIMENSIONS = 62, GET_TENSOR_SHAPE_ELEMENT_COUNT = 64,
    GET_TENSOR_TYPE_AND_SHAPE = 65, ALLOCATOR_FREE = 76, GET_ALLOCATOR_WITH_DEFAULT_OPTIONS = 78, RELEASE_STATUS = 93,
    RELEASE_SESSION = 95, RELEASE_VALUE = 96, RELEASE_TENSOR_TYPE_AND_SHAPE_INFO = 99, RELEASE_SESSION_OPTIONS = 100,
    ADD_SESSION_CONFIG_ENTRY = 130, GET_RESIZED_STRING_TENSOR_ELEMENT_BUFFER = 252,
};
#define API_VERSION 16
#define MAX_SESSIONS 256
#define MAX_DIMS 16

static void *const *api;
static Fn append_dml;
static Ort env, allocator;
static int reporting_placement;
static wchar_t *optimized; /* where the next load writes its optimized model, if anywhere */

typedef struct {
    Ort session;
    size_t inputs, outputs;
    char **input_names, **output_names;
} Session;
static Session sessions[MAX_SESSIONS];

/* Records the error of a failed call in `failure`; returns 1 if it failed. */
static int failed(OrtStatus *status, const char *what) {
    if (!status) return 0;
    const char *(*message)(OrtStatus *) = (const char *(*)(OrtStatus *))api[GET_ERROR_MESSAGE];
    fail("%s: %s", what, message(status));
    ((void (*)(OrtStatus *))api[RELEASE_STATUS])(status);
    return 1;
}
#define CALL(slot, ...) failed(((Fn)api[slot])(__VA_ARGS__), #slot)

static void release(int slot, Ort object) {
    if (object) ((void (*)(Ort))api[slot])(object);
}

/* ONNX Runtime reports where it placed each node in VerifyEachNodeIsAssignedToAnEp, at verbose level. */
static void log_message(void *param, int severity, const char *category, const char *logid, const char *where,
                        const char *message) {
    (void)param; (void)category; (void)logid;
    if (reporting_placement && where && strstr(where, "VerifyEachNodeIsAssignedToAnEp")) reply("info placement", message);
    else if (severity >= 3) reply("info log", message);
}

/* Bits per element of each ONNX element type a tensor file carries, by type number; 0: not carried (STRING, 8, is
 * carried apart; COMPLEX64, COMPLEX128 and FLOAT8E8M0 are types ONNX Runtime 1.24 does not take). */
static const unsigned char bits[] = {0, 32, 8, 8, 16, 16, 32, 64, 0, 8, 16, 64, 32, 64, 0, 0, 16, 8, 8, 8, 8, 4, 4, 4, 0, 2, 2};
#define STRING 8
#define MAGIC "OGTENSOR"
#define CARRIED(type) ((type) == STRING || ((type) > 0 && (size_t)(type) < sizeof bits && bits[type]))

/* Reads a tensor file into a new tensor of ONNX Runtime's in `*value`; 0 on success, else -1 with `failure` set. */
static int read_tensor(const char *path, Ort *value) {
    FILE *file = open_file(path, "rb");
    char magic[8];
    int32_t head[2] = {0, -1}; /* element type, dimension count */
    int64_t shape[MAX_DIMS];
    size_t count = 1;
    if (!file) return fail("cannot open %s", path);
    int ok = fread(magic, 1, 8, file) == 8 && memcmp(magic, MAGIC, 8) == 0 && fread(head, 4, 2, file) == 2 &&
             head[1] >= 0 && head[1] <= MAX_DIMS && fread(shape, 8, head[1], file) == (size_t)head[1];
    for (int d = 0; ok && d < head[1]; d++) ok = shape[d] >= 0, count *= (size_t)shape[d];
    if (!ok || !CARRIED(head[0])) {
        fclose(file);
        return fail("%s: not a tensor file of a carried type (ONNX type %d, %d dims; at most %d)", path, head[0],
                    head[1], MAX_DIMS);
    }
    int bad = CALL(CREATE_TENSOR_AS_ORT_VALUE, allocator, shape, (size_t)head[1], head[0], value), short_read = 0;
    if (!bad && head[0] == STRING) {
        uint64_t *lengths = malloc(count * sizeof *lengths + 1);
        short_read = !lengths || fread(lengths, sizeof *lengths, count, file) != count;
        for (size_t k = 0; !bad && !short_read && k < count; k++) {
            char *buffer = NULL;
            bad = CALL(GET_RESIZED_STRING_TENSOR_ELEMENT_BUFFER, *value, k, (size_t)lengths[k], &buffer);
            short_read = !bad && fread(buffer, 1, (size_t)lengths[k], file) != lengths[k];
        }
        free(lengths);
    } else if (!bad) {
        size_t bytes = (count * bits[head[0]] + 7) / 8;
        void *data = NULL;
        bad = bytes && CALL(GET_TENSOR_MUTABLE_DATA, *value, &data);
        short_read = !bad && bytes && fread(data, 1, bytes, file) != bytes;
    }
    short_read = short_read || (!bad && fgetc(file) != EOF);
    fclose(file);
    if (short_read) fail("%s: its length is not what its header says", path);
    return bad || short_read ? -1 : 0;
}

/* Writes an output tensor as a tensor file; 0 on success, else -1 with `failure` set. */
static int write_tensor(const char *path, Ort value) {
    Ort info = NULL;
    int type = 0;
    size_t dims = 0, count = 0, bytes = 0;
    int64_t shape[MAX_DIMS];
    if (CALL(GET_TENSOR_TYPE_AND_SHAPE, value, &info) || CALL(GET_TENSOR_ELEMENT_TYPE, info, &type) ||
        CALL(GET_DIMENSIONS_COUNT, info, &dims) || (dims <= MAX_DIMS && CALL(GET_DIMENSIONS, info, shape, dims)) ||
        CALL(GET_TENSOR_SHAPE_ELEMENT_COUNT, info, &count)) {
        release(RELEASE_TENSOR_TYPE_AND_SHAPE_INFO, info);
        return -1;
    }
    release(RELEASE_TENSOR_TYPE_AND_SHAPE_INFO, info);
    /* ONNX Runtime's C API numbers UINT2 and INT2 24 and 25, ONNX 25 and 26 (its 24 is FLOAT8E8M0, which ONNX Runtime
     * 1.24 lacks); CreateTensorAsOrtValue takes ONNX's numbers there, GetTensorElementType gives the C API's
     * (measured with 1.24.4). Tensor files hold ONNX's. */
    if (type == 24 || type == 25) type++;
    if (!CARRIED(type) || dims > MAX_DIMS)
        return fail("ONNX type %d with %zu dims is not carried (at most %d dims)", type, dims, MAX_DIMS);
    void *data = NULL;
    char *strings = NULL;
    size_t *offsets = NULL;
    uint64_t *lengths = NULL;
    int bad = 0;
    if (type == STRING) {
        bad = CALL(GET_STRING_TENSOR_DATA_LENGTH, value, &bytes);
        data = strings = malloc(bytes + 1);
        offsets = malloc(count * sizeof *offsets + 1), lengths = malloc(count * sizeof *lengths + 1);
        bad = bad || CALL(GET_STRING_TENSOR_CONTENT, value, strings, bytes, offsets, count);
        for (size_t k = 0; !bad && k < count; k++) lengths[k] = (k + 1 < count ? offsets[k + 1] : bytes) - offsets[k];
    } else {
        bytes = (count * bits[type] + 7) / 8;
        bad = bytes && CALL(GET_TENSOR_MUTABLE_DATA, value, &data);
    }
    FILE *file = bad ? NULL : open_file(path, "wb");
    int32_t head[2] = {type, (int32_t)dims};
    int ok = file && fwrite(MAGIC, 1, 8, file) == 8 && fwrite(head, 4, 2, file) == 2 &&
             fwrite(shape, 8, dims, file) == dims && (type != STRING || fwrite(lengths, 8, count, file) == count) &&
             fwrite(data, 1, bytes, file) == bytes;
    if (file && fclose(file) != 0) ok = 0;
    free(strings), free(offsets), free(lengths);
    if (bad) return -1;
    if (!ok) return fail("cannot write %s", path);
    return 0;
}

static void load(int mode, const char *path) {
    int fallback = mode > 0;
    int id = 0;
    while (id < MAX_SESSIONS && sessions[id].session) id++;
    if (id == MAX_SESSIONS) { reply("error", "too many sessions open"); return; }
    Session *s = &sessions[id];
    Ort options = NULL;
    wchar_t *model = wide(path);
    reporting_placement = fallback;
    int bad = CALL(CREATE_SESSION_OPTIONS, &options) || CALL(DISABLE_MEM_PATTERN, options) ||
              CALL(SET_SESSION_EXECUTION_MODE, options, 0) ||
              CALL(ADD_SESSION_CONFIG_ENTRY, options, "session.disable_cpu_ep_fallback", fallback ? "0" : "1") ||
              (fallback && CALL(SET_SESSION_LOG_SEVERITY_LEVEL, options, 0)) ||
              (mode == 2 && CALL(ADD_SESSION_CONFIG_ENTRY, options, "ep.dml.disable_graph_fusion", "1")) ||
              (optimized && CALL(SET_OPTIMIZED_MODEL_FILE_PATH, options, optimized)) ||
              failed(append_dml(options, 0), "OrtSessionOptionsAppendExecutionProvider_DML") ||
              CALL(CREATE_SESSION, env, model, options, &s->session);
    reporting_placement = 0;
    free(model), free(optimized);
    optimized = NULL;
    release(RELEASE_SESSION_OPTIONS, options);
    if (bad) {
        s->session = NULL;
        reply("error", failure);
        return;
    }
    bad = CALL(SESSION_GET_INPUT_COUNT, s->session, &s->inputs) || CALL(SESSION_GET_OUTPUT_COUNT, s->session, &s->outputs);
    s->input_names = calloc(s->inputs + 1, sizeof(char *));
    s->output_names = calloc(s->outputs + 1, sizeof(char *));
    char line[4096];
    for (size_t k = 0; !bad && k < s->inputs; k++) {
        bad = CALL(SESSION_GET_INPUT_NAME, s->session, k, allocator, &s->input_names[k]);
        if (!bad) { snprintf(line, sizeof line, "%zu %s", k, s->input_names[k]); reply("info input", line); }
    }
    for (size_t k = 0; !bad && k < s->outputs; k++) {
        bad = CALL(SESSION_GET_OUTPUT_NAME, s->session, k, allocator, &s->output_names[k]);
        if (!bad) { snprintf(line, sizeof line, "%zu %s", k, s->output_names[k]); reply("info output", line); }
    }
    if (bad) { reply("error", failure); return; } /* the session stays open: `free` releases it and its names */
    snprintf(line, sizeof line, "%d", id);
    reply("ok", line);
}

static void save(const char *path) {
    free(optimized);
    optimized = wide(path);
    reply("ok", "");
}

static Session *find(const char *text) {
    int id = atoi(text);
    if (id < 0 || id >= MAX_SESSIONS || !sessions[id].session) return NULL;
    return &sessions[id];
}

static void run(const char *arguments) {
    Session *s = find(arguments);
    const char *folder = strchr(arguments, ' ');
    if (!s || !folder) { reply("error", "run: unknown session or no folder"); return; }
    folder++;
    Ort *inputs = calloc(s->inputs + 1, sizeof(Ort)), *outputs = calloc(s->outputs + 1, sizeof(Ort));
    char path[4096];
    int bad = 0;
    for (size_t k = 0; !bad && k < s->inputs; k++) {
        snprintf(path, sizeof path, "%s/in%zu.tensor", folder, k);
        if ((bad = read_tensor(path, &inputs[k]))) blame("input '%s': ", s->input_names[k]);
    }
    bad = bad || CALL(RUN, s->session, NULL, (const char *const *)s->input_names, (const Ort *)inputs, s->inputs,
                      (const char *const *)s->output_names, s->outputs, outputs);
    for (size_t k = 0; !bad && k < s->outputs; k++) {
        int tensor = 0;
        snprintf(path, sizeof path, "%s/out%zu.tensor", folder, k);
        if ((bad = CALL(IS_TENSOR, outputs[k], &tensor))) {
            blame("output '%s': ", s->output_names[k]);
        } else if (!tensor) { /* the provider fused away the node that makes it: ONNX Runtime returns no value */
            snprintf(path, sizeof path, "%zu", k);
            reply("info absent", path);
        } else if ((bad = write_tensor(path, outputs[k]))) {
            blame("output '%s': ", s->output_names[k]);
        }
    }
    for (size_t k = 0; k < s->inputs; k++) release(RELEASE_VALUE, inputs[k]);
    for (size_t k = 0; k < s->outputs; k++) release(RELEASE_VALUE, outputs[k]);
    free(inputs), free(outputs);
    reply(bad ? "error" : "ok", bad ? failure : "");
}

static void release_session(Session *s) {
    release(RELEASE_SESSION, s->session);
    for (size_t k = 0; k < s->inputs; k++) CALL(ALLOCATOR_FREE, allocator, s->input_names[k]);
    for (size_t k = 0; k < s->outputs; k++) CALL(ALLOCATOR_FREE, allocator, s->output_names[k]);
    free(s->input_names), free(s->output_names);
    memset(s, 0, sizeof *s);
}

static void free_session(const char *arguments) {
    Session *s = find(arguments);
    if (!s) { reply("error", "free: unknown session"); return; }
    release_session(s);
    reply("ok", "");
}

typedef HRESULT(WINAPI *CreateDevice)(IUnknown *, D3D_FEATURE_LEVEL, REFIID, void **);

static void caps(void) {
    HMODULE d3d12 = LoadLibraryA("d3d12.dll");
    CreateDevice create = d3d12 ? (CreateDevice)(void *)GetProcAddress(d3d12, "D3D12CreateDevice") : NULL;
    ID3D12Device *device = NULL;
    HRESULT hr = create ? create(NULL, D3D_FEATURE_LEVEL_11_0, &IID_ID3D12Device, (void **)&device) : E_FAIL;
    if (FAILED(hr)) {
        fail("caps: no Direct3D 12 device (%#lx)", (unsigned long)hr);
        reply("error", failure);
        return;
    }
    D3D12_FEATURE_DATA_SHADER_MODEL model = {(D3D_SHADER_MODEL)0x65}; /* the highest asked: 6.5 */
    D3D12_FEATURE_DATA_D3D12_OPTIONS1 options1 = {0};
    D3D12_FEATURE_DATA_D3D12_OPTIONS4 options4 = {0};
    ID3D12Device_CheckFeatureSupport(device, D3D12_FEATURE_SHADER_MODEL, &model, sizeof model);
    ID3D12Device_CheckFeatureSupport(device, D3D12_FEATURE_D3D12_OPTIONS1, &options1, sizeof options1);
    ID3D12Device_CheckFeatureSupport(device, D3D12_FEATURE_D3D12_OPTIONS4, &options4, sizeof options4);
    ID3D12Device_Release(device);
    char text[128];
    snprintf(text, sizeof text, "shader_model %u.%u wave_ops %d int64_ops %d native16 %d",
             (unsigned)model.HighestShaderModel >> 4, (unsigned)model.HighestShaderModel & 0xf, options1.WaveOps,
             options1.Int64ShaderOps, options4.Native16BitShaderOpsSupported);
    reply("ok", text);
}

static int handle(const char *line) {
    if (strncmp(line, "load ", 5) == 0 && line[5] >= '0' && line[5] <= '2' && line[6] == ' ') load(line[5] - '0', line + 7);
    else if (strncmp(line, "save ", 5) == 0) save(line + 5);
    else if (strncmp(line, "run ", 4) == 0) run(line + 4);
    else if (strncmp(line, "free ", 5) == 0) free_session(line + 5);
    else if (strcmp(line, "caps") == 0) caps();
    else return 0;
    return 1;
}

/* Linux lets a process use Intel's AMX tiles (Xeons since Sapphire Rapids) only once it has asked the kernel for
 * them, arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA). ONNX Runtime's Windows build never asks, and its int8
 * kernels (MLAS) die at their first tile instruction (SIGILL: Wine's "Unhandled illegal instruction"). Under Wine the
 * runner is that Linux process, so it asks, with the raw system call, before ONNX Runtime is loaded; on a CPU
 * without AMX the call fails and changes nothing. Never on Windows, whose system calls are numbered otherwise. */
static void allow_amx_tiles(void) {
    if (!GetProcAddress(GetModuleHandleA("ntdll.dll"), "wine_get_version")) return;
    long result;
    __asm__ volatile("syscall" : "=a"(result) : "a"(158L), "D"(0x1023L), "S"(18L) : "rcx", "r11", "memory");
    (void)result;
}

int main(int argc, char **argv) {
    if (begin(argc, "usage: runner.exe <folder of onnxruntime.dll>")) return 2;
    allow_amx_tiles();
    char path[4096];
    snprintf(path, sizeof path, "%s\\onnxruntime.dll", argv[1]);
    HMODULE ort = LoadLibraryExA(path, NULL, LOAD_WITH_ALTERED_SEARCH_PATH);
    if (!ort) {
        fail("cannot load %s (error %lu)", path, GetLastError());
        reply("error", failure);
        return 1;
    }
    const OrtApiBase *(*base)(void) = (const OrtApiBase *(*)(void))(void *)GetProcAddress(ort, "OrtGetApiBase");
    append_dml = (Fn)(void *)GetProcAddress(ort, "OrtSessionOptionsAppendExecutionProvider_DML");
    api = base ? base()->GetApi(API_VERSION) : NULL;
    if (!api || !append_dml) {
        reply("error", "onnxruntime.dll lacks the C API or the DirectML provider");
        return 1;
    }
    if (CALL(CREATE_ENV_WITH_CUSTOM_LOGGER, (LogFn)log_message, NULL, 2, "onnx-gather", &env) ||
        CALL(GET_ALLOCATOR_WITH_DEFAULT_OPTIONS, &allocator)) {
        reply("error", failure);
        return 1;
    }
    reply("ok", base()->GetVersionString());
    serve(handle);
    /* Every session released before the process ends: one left after a failed run made the exit crash (SIGSEGV). */
    for (size_t k = 0; k < MAX_SESSIONS; k++)
        if (sessions[k].session) release_session(&sessions[k]);
    reply("ok", "");
    return 0;
}
