/* direct.exe: DirectML's gather and scatter operators called directly (DirectML.dll, no ONNX Runtime), for onnx-gather.
 *
 * Built for Windows (mingw-w64) by `onnx-gather setup-directml` beside runner.exe and run under Wine by
 * onnx_gather.directml.direct. Requests and replies are framed as protocol.h says, as runner.exe's are.
 *
 *   (at start)                -> ok <the highest DirectML feature level of the device, e.g. 6.4>
 *   cases <folder> <count>    -> for k in 0..count-1 the case in <folder>/<k>/: info case <k> ok (output.bin written
 *                                there) or info case <k> refused <create|compile|init|run> 0x<HRESULT>; then ok <count>
 *   quit                      -> ok, then the process ends
 *
 * A case folder holds desc.txt (the operator, its attributes, the descs of its tensors: input, indices, for a scatter
 * updates, and output; the byte the output buffer is filled with before the dispatch; and optionally a line `memory
 * <bytes> <offset of each tensor>`), input.bin, indices.bin and for a scatter updates.bin (each tensor's whole buffer,
 * exactly its TotalTensorSizeInBytes). Each tensor has a buffer of its own, or with `memory` all share one buffer of
 * that many bytes, each bound at its offset (the output's may be the input's: in place); that buffer is filled with
 * the fill byte, then the input files are written at their offsets in order. output.bin is the output's buffer read
 * back whole. A malformed case is "error" for the whole request; what DirectML (or Direct3D 12 under it) refuses is
 * the case's answer.
 *
 * One device, command queue, command list and shader-visible descriptor heap serve the whole process: under vkd3d a
 * shader-visible heap costs about 0.5 s and 1.5 GB to create. Everything else is made and released per case.
 */
#define COBJMACROS
#define INITGUID
#include <d3d12.h>
#include <stdint.h>

#include "protocol.h"

/* --- The part of DirectML.h used here: mingw-w64 has none. Enum values, struct layouts, IIDs and vtable orders
 * are those of the Rust `windows` crate's generated bindings (microsoft/windows-rs,
 * crates/libs/windows/src/Windows/Win32/AI/MachineLearning/DirectML/mod.rs). --- */
enum { DML_TENSOR_TYPE_BUFFER = 1, DML_BINDING_TYPE_BUFFER = 1, DML_FEATURE_FEATURE_LEVELS = 1 };

/* DML_TENSOR_DESC, DML_OPERATOR_DESC and DML_BINDING_DESC: a type and a pointer to the desc of that type. */
typedef struct { int Type; const void *Desc; } TypedDesc;

typedef struct {
    int DataType, Flags;
    UINT DimensionCount;
    const UINT *Sizes, *Strides;
    UINT64 TotalTensorSizeInBytes;
    UINT GuaranteedBaseOffsetAlignment;
} DML_BUFFER_TENSOR_DESC;

/* DML_GATHER_OPERATOR_DESC (Axis, IndexDimensions), DML_GATHER_ELEMENTS_OPERATOR_DESC (Axis),
 * DML_GATHER_ND_OPERATOR_DESC (InputDimensionCount, IndicesDimensionCount) and DML_GATHER_ND1_OPERATOR_DESC (the
 * same and BatchDimensionCount): three tensor descs (input, indices, output), then each operator's UINTs in this
 * order. DML_SCATTER_OPERATOR_DESC (Axis) and DML_SCATTER_ND_OPERATOR_DESC (InputDimensionCount,
 * IndicesDimensionCount): four (input, indices, updates, output), then the UINTs. */
typedef struct { const TypedDesc *Tensors[3]; UINT Attributes[3]; } GatherDesc;
typedef struct { const TypedDesc *Tensors[4]; UINT Attributes[2]; } ScatterDesc;

typedef struct { ID3D12Resource *Buffer; UINT64 Offset, SizeInBytes; } DML_BUFFER_BINDING;
typedef struct { UINT RequiredDescriptorCount; UINT64 TemporaryResourceSize, PersistentResourceSize; } DML_BINDING_PROPERTIES;
typedef struct { UINT RequestedFeatureLevelCount; const int *RequestedFeatureLevels; } DML_FEATURE_QUERY_FEATURE_LEVELS;
typedef struct { int MaxSupportedFeatureLevel; } DML_FEATURE_DATA_FEATURE_LEVELS;

typedef struct Dispatchable Dispatchable; /* IDMLCompiledOperator, IDMLOperatorInitializer */
typedef struct BindingTable BindingTable;
typedef struct {
    void *Dispatchable;
    D3D12_CPU_DESCRIPTOR_HANDLE CPUDescriptorHandle;
    D3D12_GPU_DESCRIPTOR_HANDLE GPUDescriptorHandle;
    UINT SizeInDescriptors;
} DML_BINDING_TABLE_DESC;

/* Vtables in their order; methods not called here are placeholders. IUnknown, then IDMLObject's four. */
#define OBJECT_METHODS(T)                                                                                    \
    HRESULT(WINAPI *QueryInterface)(T *, REFIID, void **);                                                   \
    ULONG(WINAPI *AddRef)(T *);                                                                              \
    ULONG(WINAPI *Release)(T *);                                                                             \
    void *GetPrivateData, *SetPrivateData, *SetPrivateDataInterface, *SetName;
#define CHILD_METHODS(T) OBJECT_METHODS(T) void *GetDevice; /* IDMLDeviceChild */

typedef struct DmlDevice {
    const struct {
        OBJECT_METHODS(struct DmlDevice)
        HRESULT(WINAPI *CheckFeatureSupport)(struct DmlDevice *, int, UINT, const void *, UINT, void *);
        HRESULT(WINAPI *CreateOperator)(struct DmlDevice *, const TypedDesc *, REFIID, void **);
        HRESULT(WINAPI *CompileOperator)(struct DmlDevice *, IUnknown *, int flags, REFIID, void **);
        HRESULT(WINAPI *CreateOperatorInitializer)(struct DmlDevice *, UINT, Dispatchable *const *, REFIID, void **);
        HRESULT(WINAPI *CreateCommandRecorder)(struct DmlDevice *, REFIID, void **);
        HRESULT(WINAPI *CreateBindingTable)(struct DmlDevice *, const DML_BINDING_TABLE_DESC *, REFIID, void **);
        void *Evict, *MakeResident, *GetDeviceRemovedReason, *GetParentDevice;
    } *lpVtbl;
} DmlDevice;

struct Dispatchable { /* IDMLPageable adds nothing; GetBindingProperties returns a struct: MSVC's hidden pointer */
    const struct {
        CHILD_METHODS(Dispatchable)
        DML_BINDING_PROPERTIES *(WINAPI *GetBindingProperties)(Dispatchable *, DML_BINDING_PROPERTIES *);
    } *lpVtbl;
};

struct BindingTable {
    const struct {
        CHILD_METHODS(BindingTable)
        void(WINAPI *BindInputs)(BindingTable *, UINT, const TypedDesc *);
        void(WINAPI *BindOutputs)(BindingTable *, UINT, const TypedDesc *);
        void(WINAPI *BindTemporaryResource)(BindingTable *, const TypedDesc *);
        void(WINAPI *BindPersistentResource)(BindingTable *, const TypedDesc *);
        HRESULT(WINAPI *Reset)(BindingTable *, const DML_BINDING_TABLE_DESC *);
    } *lpVtbl;
};

typedef struct Recorder {
    const struct {
        CHILD_METHODS(struct Recorder)
        void(WINAPI *RecordDispatch)(struct Recorder *, ID3D12CommandList *, Dispatchable *, BindingTable *);
    } *lpVtbl;
} Recorder;

DEFINE_GUID(IID_IDMLDevice, 0x6dbd6437, 0x96fd, 0x423f, 0xa9, 0x8c, 0xae, 0x5e, 0x7c, 0x2a, 0x57, 0x3f);
DEFINE_GUID(IID_IDMLOperator, 0x26caae7a, 0x3081, 0x4633, 0x95, 0x81, 0x22, 0x6f, 0xbe, 0x57, 0x69, 0x5d);
DEFINE_GUID(IID_IDMLCompiledOperator, 0x6b15e56a, 0xbf5c, 0x4902, 0x92, 0xd8, 0xda, 0x3a, 0x65, 0x0a, 0xfe, 0xa4);
DEFINE_GUID(IID_IDMLOperatorInitializer, 0x427c1113, 0x435c, 0x469c, 0x86, 0x76, 0x4d, 0x5d, 0xd0, 0x72, 0xf8, 0x13);
DEFINE_GUID(IID_IDMLBindingTable, 0x29c687dc, 0xde74, 0x4e3b, 0xab, 0x00, 0x11, 0x68, 0xf2, 0xfc, 0x3c, 0xfc);
DEFINE_GUID(IID_IDMLCommandRecorder, 0xe6857a76, 0x2e3e, 0x4fdd, 0xbf, 0xf4, 0x5d, 0x2b, 0xa1, 0x0f, 0xb4, 0x53);

typedef HRESULT(WINAPI *CreateDmlDevice)(ID3D12Device *, int flags, REFIID, void **);
typedef HRESULT(WINAPI *CreateD3D12Device)(IUnknown *, D3D_FEATURE_LEVEL, REFIID, void **);

/* --- The cases --- */
#define MAX_DIMS 16 /* more than DirectML's 8, so that DirectML is the one to refuse */
#define HEAP_DESCRIPTORS 1024
#define MAX_TENSORS 4

/* Each operator: its name in desc.txt, DML_OPERATOR_TYPE, tensor count (the last is the output), attributes. */
static const struct { const char *name; int type, tensors; const char *attributes[3]; } operators[] = {
    {"GATHER", 67, 3, {"axis", "index_dimensions"}},
    {"GATHER_ELEMENTS", 107, 3, {"axis"}},
    {"GATHER_ND", 108, 3, {"input_dimension_count", "indices_dimension_count"}},
    {"GATHER_ND1", 140, 3, {"input_dimension_count", "indices_dimension_count", "batch_dimension_count"}},
    {"SCATTER", 94, 4, {"axis"}},
    {"SCATTER_ND", 109, 4, {"input_dimension_count", "indices_dimension_count"}},
};
static const char *const input_files[] = {"input.bin", "indices.bin", "updates.bin"}; /* the tensors before the output */
static const char *const data_types[] = {"UNKNOWN", "FLOAT32", "FLOAT16", "UINT32", "UINT16", "UINT8", "INT32",
                                         "INT16", "INT8", "FLOAT64", "UINT64", "INT64"}; /* by their values */

typedef struct {
    UINT sizes[MAX_DIMS], strides[MAX_DIMS];
    int strided;
    DML_BUFFER_TENSOR_DESC buffer;
    TypedDesc desc;
} Tensor;

typedef struct {
    int type, count; /* count: tensors, the output last */
    union { GatherDesc gather; ScatterDesc scatter; } op;
    Tensor tensors[MAX_TENSORS];
    int fill, shared; /* shared: all tensors in one buffer of `memory` bytes, tensor t at byte `at[t]` */
    UINT64 memory, at[MAX_TENSORS];
} Case;

static ID3D12Device *device;
static DmlDevice *dml;
static ID3D12CommandQueue *queue;
static ID3D12CommandAllocator *allocator;
static ID3D12GraphicsCommandList *list;
static ID3D12Fence *fence;
static UINT64 fence_value;
static HANDLE fence_event;
static ID3D12DescriptorHeap *heap;
static UINT descriptor_size;
static Recorder *recorder;

static FILE *open_in(const char *folder, int k, const char *name, const char *mode) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%d/%s", folder, k, name);
    return open_file(path, mode);
}

/* The next whitespace-separated word of desc.txt, which must be `expected` if that is given. */
static int word(FILE *file, char *text, const char *expected) {
    if (fscanf(file, "%63s", text) != 1) return fail("desc.txt ends early");
    if (expected && strcmp(text, expected) != 0) return fail("desc.txt: '%s' where '%s' belongs", text, expected);
    return 0;
}

static int number(FILE *file, UINT64 *value, UINT64 maximum) {
    char text[64], *end;
    if (word(file, text, NULL)) return -1;
    *value = _strtoui64(text, &end, 10);
    if (*end || text[0] == '-' || *value > maximum)
        return fail("desc.txt: '%s' is not a number up to %llu", text, maximum);
    return 0;
}

static int read_tensor(FILE *file, Tensor *t) {
    char text[64];
    UINT64 value, dims;
    if (word(file, text, "tensor") || word(file, text, NULL)) return -1;
    t->buffer.DataType = 0;
    for (int type = 1; type < (int)(sizeof data_types / sizeof *data_types); type++)
        if (strcmp(text, data_types[type]) == 0) t->buffer.DataType = type;
    if (!t->buffer.DataType) return fail("desc.txt: unknown data type '%s'", text);
    if (number(file, &dims, MAX_DIMS)) return -1;
    for (UINT64 d = 0; d < dims; d++) {
        if (number(file, &value, UINT32_MAX)) return -1;
        t->sizes[d] = (UINT)value;
    }
    if (word(file, text, "strides") || number(file, &value, MAX_DIMS)) return -1;
    if (value != 0 && value != dims) return fail("desc.txt: %llu strides for %llu sizes", value, dims);
    t->strided = value != 0;
    for (UINT64 d = 0; t->strided && d < dims; d++) {
        if (number(file, &value, UINT32_MAX)) return -1;
        t->strides[d] = (UINT)value;
    }
    if (word(file, text, "total") || number(file, &t->buffer.TotalTensorSizeInBytes, 1ull << 40)) return -1;
    if (word(file, text, "align") || number(file, &value, UINT32_MAX)) return -1;
    t->buffer.GuaranteedBaseOffsetAlignment = (UINT)value;
    t->buffer.Flags = 0;
    t->buffer.DimensionCount = (UINT)dims;
    t->buffer.Sizes = t->sizes;
    t->buffer.Strides = t->strided ? t->strides : NULL;
    t->desc.Type = DML_TENSOR_TYPE_BUFFER;
    t->desc.Desc = &t->buffer;
    return 0;
}

static int read_case(FILE *file, Case *c) {
    char text[64];
    UINT64 value;
    size_t op = 0;
    if (word(file, text, "operator") || word(file, text, NULL)) return -1;
    while (op < sizeof operators / sizeof *operators && strcmp(text, operators[op].name) != 0) op++;
    if (op == sizeof operators / sizeof *operators) return fail("desc.txt: unknown operator '%s'", text);
    c->type = operators[op].type;
    c->count = operators[op].tensors;
    memset(&c->op, 0, sizeof c->op);
    UINT *attributes = c->count == 3 ? c->op.gather.Attributes : c->op.scatter.Attributes;
    const TypedDesc **tensors = c->count == 3 ? c->op.gather.Tensors : c->op.scatter.Tensors;
    for (int a = 0; a < 3 && operators[op].attributes[a]; a++) {
        if (word(file, text, operators[op].attributes[a]) || number(file, &value, UINT32_MAX)) return -1;
        attributes[a] = (UINT)value;
    }
    for (int t = 0; t < c->count; t++) {
        if (read_tensor(file, &c->tensors[t])) return -1;
        tensors[t] = &c->tensors[t].desc;
    }
    if (word(file, text, "fill") || number(file, &value, 255)) return -1;
    c->fill = (int)value;
    c->shared = fscanf(file, "%63s", text) == 1;
    if (!c->shared) return 0;
    if (strcmp(text, "memory") != 0) return fail("desc.txt: '%s' where 'memory' or the end belongs", text);
    if (number(file, &c->memory, 1ull << 40)) return -1;
    for (int t = 0; t < c->count; t++) {
        if (number(file, &c->at[t], c->memory)) return -1;
        if (c->at[t] + c->tensors[t].buffer.TotalTensorSizeInBytes > c->memory)
            return fail("desc.txt: tensor %d at %llu does not fit in %llu bytes", t, c->at[t], c->memory);
    }
    return 0;
}

static HRESULT make_buffer(D3D12_HEAP_TYPE type, UINT64 size, D3D12_RESOURCE_STATES state, ID3D12Resource **buffer) {
    D3D12_HEAP_PROPERTIES properties = {type, D3D12_CPU_PAGE_PROPERTY_UNKNOWN, D3D12_MEMORY_POOL_UNKNOWN, 1, 1};
    D3D12_RESOURCE_DESC desc = {D3D12_RESOURCE_DIMENSION_BUFFER, 0, size, 1, 1, 1, DXGI_FORMAT_UNKNOWN, {1, 0},
                                D3D12_TEXTURE_LAYOUT_ROW_MAJOR,
                                type == D3D12_HEAP_TYPE_DEFAULT ? D3D12_RESOURCE_FLAG_ALLOW_UNORDERED_ACCESS : 0};
    return ID3D12Device_CreateCommittedResource(device, &properties, D3D12_HEAP_FLAG_NONE, &desc, state, NULL,
                                                &IID_ID3D12Resource, (void **)buffer);
}

static void barrier(ID3D12Resource *resource, D3D12_RESOURCE_STATES before, D3D12_RESOURCE_STATES after) {
    D3D12_RESOURCE_BARRIER b = {0};
    if (resource) {
        b.Type = D3D12_RESOURCE_BARRIER_TYPE_TRANSITION;
        b.Transition.pResource = resource;
        b.Transition.Subresource = D3D12_RESOURCE_BARRIER_ALL_SUBRESOURCES;
        b.Transition.StateBefore = before;
        b.Transition.StateAfter = after;
    } else b.Type = D3D12_RESOURCE_BARRIER_TYPE_UAV; /* every UAV access before it, before every one after */
    ID3D12GraphicsCommandList_ResourceBarrier(list, 1, &b);
}

static DML_BINDING_TABLE_DESC table_desc(void *dispatchable, UINT first, UINT count) {
    D3D12_CPU_DESCRIPTOR_HANDLE cpu;
    D3D12_GPU_DESCRIPTOR_HANDLE gpu;
    /* Methods that return a struct take a hidden result pointer (MSVC's convention; the C vtable says so). */
    heap->lpVtbl->GetCPUDescriptorHandleForHeapStart(heap, &cpu);
    heap->lpVtbl->GetGPUDescriptorHandleForHeapStart(heap, &gpu);
    cpu.ptr += (SIZE_T)first * descriptor_size;
    gpu.ptr += (UINT64)first * descriptor_size;
    return (DML_BINDING_TABLE_DESC){dispatchable, cpu, gpu, count};
}

/* Reads `bytes` bytes of <folder>/<k>/<name>, which must hold exactly that many, into `data`. */
static int read_exactly(const char *folder, int k, const char *name, void *data, UINT64 bytes) {
    FILE *file = open_in(folder, k, name, "rb");
    if (!file) return fail("case %d: cannot open %s", k, name);
    int ok = fread(data, 1, bytes, file) == bytes && fgetc(file) == EOF;
    fclose(file);
    if (!ok) return fail("case %d: %s does not hold exactly %llu bytes", k, name, bytes);
    return 0;
}

/* One case through its stages: what it is, what was made for it on the device (released after it, whatever
 * happened), and where DirectML (or Direct3D 12 under it) refused it. */
typedef struct {
    const char *folder;
    int k;
    Case c;
    IUnknown *op;
    Dispatchable *compiled, *initializer;
    BindingTable *table;
    ID3D12Resource *buffers[MAX_TENSORS], *upload, *readback, *persistent, *temporary;
    DML_BINDING_PROPERTIES init, exec;
    int buffer_count;
    UINT64 sizes[MAX_TENSORS], offsets[MAX_TENSORS], staged, temporary_size; /* each buffer's size and upload offset */
    const char *stage; /* the stage that refused the case, or NULL */
    HRESULT hr;
} Run;

/* A stage returns 0 when the case goes on, 1 when it was refused (`stage` and `hr` recorded), -1 (with `failure`)
 * when the case is malformed. */
static int refused(Run *r, const char *stage, HRESULT hr) {
    r->stage = stage;
    r->hr = hr;
    return 1;
}

static int read_desc(Run *r) {
    FILE *file = open_in(r->folder, r->k, "desc.txt", "rb");
    if (!file) return fail("case %d: cannot open desc.txt", r->k);
    int bad = read_case(file, &r->c);
    fclose(file);
    if (bad) return blame("case %d: ", r->k);
    return 0;
}

static UINT64 buffer_size(const Tensor *t) { /* D3D12 has no empty buffer; DirectML judges the desc's total */
    return t->buffer.TotalTensorSizeInBytes ? t->buffer.TotalTensorSizeInBytes : 4;
}

/* Where tensor t lives: its buffer, and its byte offset there. */
static int buffer_of(const Run *r, int t) { return r->c.shared ? 0 : t; }
static UINT64 offset_of(const Run *r, int t) { return r->c.shared ? r->c.at[t] : 0; }

/* The operator created, compiled and given its initializer; what both ask for. */
static int create_operator(Run *r) {
    TypedDesc op_desc = {r->c.type, &r->c.op};
    HRESULT hr = dml->lpVtbl->CreateOperator(dml, &op_desc, &IID_IDMLOperator, (void **)&r->op);
    if (FAILED(hr)) return refused(r, "create", hr);
    hr = dml->lpVtbl->CompileOperator(dml, r->op, 0, &IID_IDMLCompiledOperator, (void **)&r->compiled);
    if (FAILED(hr)) return refused(r, "compile", hr);
    hr = dml->lpVtbl->CreateOperatorInitializer(dml, 1, &r->compiled, &IID_IDMLOperatorInitializer,
                                                (void **)&r->initializer);
    if (FAILED(hr)) return refused(r, "init", hr);
    r->initializer->lpVtbl->GetBindingProperties(r->initializer, &r->init);
    r->compiled->lpVtbl->GetBindingProperties(r->compiled, &r->exec);
    if ((UINT64)r->init.RequiredDescriptorCount + r->exec.RequiredDescriptorCount > HEAP_DESCRIPTORS)
        return fail("case %d: DirectML asks for %u + %u descriptors, the heap has %d", r->k,
                    r->init.RequiredDescriptorCount, r->exec.RequiredDescriptorCount, HEAP_DESCRIPTORS);
    r->temporary_size = max(r->init.TemporaryResourceSize, r->exec.TemporaryResourceSize);
    r->buffer_count = r->c.shared ? 1 : r->c.count;
    for (int b = 0; b < r->buffer_count; b++) {
        r->sizes[b] = r->c.shared ? r->c.memory : buffer_size(&r->c.tensors[b]);
        r->offsets[b] = r->staged;
        r->staged += r->sizes[b];
    }
    return 0;
}

/* The tensors' buffers, one upload buffer for them all, the readback buffer, the persistent and temporary ones. */
static int allocate(Run *r) {
    HRESULT hr = S_OK;
    for (int b = 0; b < r->buffer_count && SUCCEEDED(hr); b++)
        hr = make_buffer(D3D12_HEAP_TYPE_DEFAULT, r->sizes[b], D3D12_RESOURCE_STATE_COPY_DEST, &r->buffers[b]);
    if (SUCCEEDED(hr)) hr = make_buffer(D3D12_HEAP_TYPE_UPLOAD, r->staged, D3D12_RESOURCE_STATE_GENERIC_READ, &r->upload);
    if (SUCCEEDED(hr))
        hr = make_buffer(D3D12_HEAP_TYPE_READBACK, r->sizes[buffer_of(r, r->c.count - 1)], D3D12_RESOURCE_STATE_COPY_DEST,
                         &r->readback);
    if (SUCCEEDED(hr) && r->exec.PersistentResourceSize)
        hr = make_buffer(D3D12_HEAP_TYPE_DEFAULT, r->exec.PersistentResourceSize, D3D12_RESOURCE_STATE_UNORDERED_ACCESS,
                         &r->persistent);
    if (SUCCEEDED(hr) && r->temporary_size)
        hr = make_buffer(D3D12_HEAP_TYPE_DEFAULT, r->temporary_size, D3D12_RESOURCE_STATE_UNORDERED_ACCESS,
                         &r->temporary);
    if (FAILED(hr)) return refused(r, "run", hr);
    return 0;
}

/* The output's buffer filled with the case's byte in the upload buffer, then the input files written at their places. */
static int upload(Run *r) {
    unsigned char *staging;
    HRESULT hr = ID3D12Resource_Map(r->upload, 0, NULL, (void **)&staging);
    if (FAILED(hr)) return refused(r, "run", hr);
    int out = buffer_of(r, r->c.count - 1), bad = 0;
    memset(staging + r->offsets[out], r->c.fill, r->sizes[out]);
    for (int t = 0; t < r->c.count - 1 && !bad; t++)
        bad = read_exactly(r->folder, r->k, input_files[t], staging + r->offsets[buffer_of(r, t)] + offset_of(r, t),
                           r->c.tensors[t].buffer.TotalTensorSizeInBytes);
    ID3D12Resource_Unmap(r->upload, 0, NULL);
    return bad ? -1 : 0;
}

static TypedDesc binding_of(DML_BUFFER_BINDING *binding, ID3D12Resource *buffer, UINT64 offset, UINT64 size) {
    *binding = (DML_BUFFER_BINDING){buffer, offset, size};
    return (TypedDesc){DML_BINDING_TYPE_BUFFER, binding};
}

/* Into the command list: the tensors copied to their buffers, then the initializer, whose output is the operator's
 * persistent resource. */
static int record_initializer(Run *r) {
    DML_BINDING_TABLE_DESC table = table_desc(r->initializer, 0, r->init.RequiredDescriptorCount);
    HRESULT hr = dml->lpVtbl->CreateBindingTable(dml, &table, &IID_IDMLBindingTable, (void **)&r->table);
    if (SUCCEEDED(hr)) hr = ID3D12CommandAllocator_Reset(allocator);
    if (SUCCEEDED(hr)) hr = ID3D12GraphicsCommandList_Reset(list, allocator, NULL);
    if (FAILED(hr)) return refused(r, "run", hr);
    for (int b = 0; b < r->buffer_count; b++) {
        ID3D12GraphicsCommandList_CopyBufferRegion(list, r->buffers[b], 0, r->upload, r->offsets[b], r->sizes[b]);
        barrier(r->buffers[b], D3D12_RESOURCE_STATE_COPY_DEST, D3D12_RESOURCE_STATE_UNORDERED_ACCESS);
    }
    ID3D12GraphicsCommandList_SetDescriptorHeaps(list, 1, &heap);
    DML_BUFFER_BINDING persistent, temporary;
    TypedDesc persistent_binding = binding_of(&persistent, r->persistent, 0, r->exec.PersistentResourceSize);
    TypedDesc temporary_binding = binding_of(&temporary, r->temporary, 0, r->temporary_size);
    if (r->init.TemporaryResourceSize) r->table->lpVtbl->BindTemporaryResource(r->table, &temporary_binding);
    if (r->persistent) r->table->lpVtbl->BindOutputs(r->table, 1, &persistent_binding);
    recorder->lpVtbl->RecordDispatch(recorder, (ID3D12CommandList *)list, r->initializer, r->table);
    barrier(NULL, 0, 0);
    return 0;
}

/* Into the command list: the operator, then its output copied to the readback buffer; the list closed. The
 * operator's descriptors follow the initializer's: both stay valid until the list has run. */
static int record_operator(Run *r) {
    DML_BINDING_TABLE_DESC table = table_desc(r->compiled, r->init.RequiredDescriptorCount, r->exec.RequiredDescriptorCount);
    HRESULT hr = r->table->lpVtbl->Reset(r->table, &table);
    if (FAILED(hr)) {
        ID3D12GraphicsCommandList_Close(list);
        return refused(r, "run", hr);
    }
    DML_BUFFER_BINDING buffers[MAX_TENSORS], persistent, temporary;
    TypedDesc bindings[MAX_TENSORS];
    int out = r->c.count - 1;
    for (int t = 0; t <= out; t++)
        bindings[t] = binding_of(&buffers[t], r->buffers[buffer_of(r, t)], offset_of(r, t), buffer_size(&r->c.tensors[t]));
    TypedDesc persistent_binding = binding_of(&persistent, r->persistent, 0, r->exec.PersistentResourceSize);
    TypedDesc temporary_binding = binding_of(&temporary, r->temporary, 0, r->temporary_size);
    r->table->lpVtbl->BindInputs(r->table, out, bindings);
    r->table->lpVtbl->BindOutputs(r->table, 1, &bindings[out]);
    if (r->exec.TemporaryResourceSize) r->table->lpVtbl->BindTemporaryResource(r->table, &temporary_binding);
    if (r->persistent) r->table->lpVtbl->BindPersistentResource(r->table, &persistent_binding);
    recorder->lpVtbl->RecordDispatch(recorder, (ID3D12CommandList *)list, r->compiled, r->table);
    int b = buffer_of(r, out);
    barrier(r->buffers[b], D3D12_RESOURCE_STATE_UNORDERED_ACCESS, D3D12_RESOURCE_STATE_COPY_SOURCE);
    ID3D12GraphicsCommandList_CopyBufferRegion(list, r->readback, 0, r->buffers[b], 0, r->sizes[b]);
    hr = ID3D12GraphicsCommandList_Close(list);
    if (FAILED(hr)) return refused(r, "run", hr);
    return 0;
}

/* The command list run, and waited for. */
static int execute(Run *r) {
    ID3D12CommandQueue_ExecuteCommandLists(queue, 1, (ID3D12CommandList **)&list);
    HRESULT hr = ID3D12CommandQueue_Signal(queue, fence, ++fence_value);
    if (FAILED(hr)) return refused(r, "run", hr);
    if (ID3D12Fence_GetCompletedValue(fence) < fence_value) {
        ID3D12Fence_SetEventOnCompletion(fence, fence_value, fence_event);
        WaitForSingleObject(fence_event, INFINITE);
    }
    hr = ID3D12Device_GetDeviceRemovedReason(device);
    if (FAILED(hr)) return refused(r, "run", hr);
    return 0;
}

/* The output's buffer, read back whole (its total, or the shared memory), into output.bin. */
static int read_back(Run *r) {
    unsigned char *result;
    int out = r->c.count - 1;
    D3D12_RANGE range = {0, (SIZE_T)r->sizes[buffer_of(r, out)]};
    HRESULT hr = ID3D12Resource_Map(r->readback, 0, &range, (void **)&result);
    if (FAILED(hr)) return refused(r, "run", hr);
    FILE *file = open_in(r->folder, r->k, "output.bin", "wb");
    UINT64 total = r->c.shared ? r->c.memory : r->c.tensors[out].buffer.TotalTensorSizeInBytes;
    int written = file && fwrite(result, 1, total, file) == total;
    if (file && fclose(file) != 0) written = 0;
    D3D12_RANGE none = {0, 0};
    ID3D12Resource_Unmap(r->readback, 0, &none);
    if (!written) return fail("case %d: cannot write output.bin", r->k);
    return 0;
}

static void release_all(Run *r) {
    IUnknown *all[] = {(IUnknown *)r->table, (IUnknown *)r->initializer, (IUnknown *)r->compiled, r->op,
                       (IUnknown *)r->buffers[0], (IUnknown *)r->buffers[1], (IUnknown *)r->buffers[2], (IUnknown *)r->buffers[3],
                       (IUnknown *)r->upload, (IUnknown *)r->readback, (IUnknown *)r->persistent,
                       (IUnknown *)r->temporary};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i]) IUnknown_Release(all[i]);
}

/* The case in <folder>/<k>/ through every stage until one refuses it; 0 (refused, or output.bin written), or -1
 * (with `failure`) for a malformed case. */
static int run_case(Run *r) {
    static int (*const stages[])(Run *) = {read_desc,          create_operator, allocate, upload,
                                           record_initializer, record_operator, execute,  read_back};
    for (size_t s = 0; s < sizeof stages / sizeof *stages; s++) {
        int done = stages[s](r);
        if (done) return done < 0 ? -1 : 0;
    }
    return 0;
}

static void cases(const char *arguments) {
    char folder[4096], line[128];
    const char *space = strrchr(arguments, ' ');
    int count = space ? atoi(space + 1) : -1;
    if (!space || count < 0 || (size_t)(space - arguments) >= sizeof folder) {
        reply("error", "usage: cases <folder> <count>");
        return;
    }
    memcpy(folder, arguments, space - arguments);
    folder[space - arguments] = 0;
    for (int k = 0; k < count; k++) {
        Run r = {.folder = folder, .k = k};
        int bad = run_case(&r);
        release_all(&r);
        if (bad) {
            reply("error", failure);
            return;
        }
        if (r.stage) snprintf(line, sizeof line, "case %d refused %s 0x%08lx", k, r.stage, (unsigned long)r.hr);
        else snprintf(line, sizeof line, "case %d ok", k);
        reply("info", line);
    }
    snprintf(line, sizeof line, "%d", count);
    reply("ok", line);
}

/* 0 if `hr` is a success, else -1 with `failure` naming `what`. */
static int check(HRESULT hr, const char *what) {
    if (FAILED(hr)) return fail("%s failed (0x%08lx)", what, (unsigned long)hr);
    return 0;
}

/* The device, the DirectML device and what every case shares; 0 or -1 with `failure` set. */
static int start(const char *bin) {
    char path[4096];
    HMODULE d3d12 = LoadLibraryA("d3d12.dll"); /* ours in the program's folder (WINEDLLOVERRIDES d3d12=n,b) */
    CreateD3D12Device create = d3d12 ? (CreateD3D12Device)(void *)GetProcAddress(d3d12, "D3D12CreateDevice") : NULL;
    snprintf(path, sizeof path, "%s\\DirectML.dll", bin);
    HMODULE directml = LoadLibraryExA(path, NULL, LOAD_WITH_ALTERED_SEARCH_PATH);
    CreateDmlDevice create_dml = directml ? (CreateDmlDevice)(void *)GetProcAddress(directml, "DMLCreateDevice") : NULL;
    if (!create || !create_dml)
        return fail("cannot load D3D12CreateDevice from d3d12.dll or DMLCreateDevice from %s (error %lu)", path,
                    GetLastError());
    D3D12_COMMAND_QUEUE_DESC queue_desc = {D3D12_COMMAND_LIST_TYPE_DIRECT, 0, D3D12_COMMAND_QUEUE_FLAG_NONE, 0};
    D3D12_DESCRIPTOR_HEAP_DESC heap_desc = {D3D12_DESCRIPTOR_HEAP_TYPE_CBV_SRV_UAV, HEAP_DESCRIPTORS,
                                            D3D12_DESCRIPTOR_HEAP_FLAG_SHADER_VISIBLE, 0};
    if (check(create(NULL, D3D_FEATURE_LEVEL_11_0, &IID_ID3D12Device, (void **)&device), "D3D12CreateDevice") ||
        check(create_dml(device, 0, &IID_IDMLDevice, (void **)&dml), "DMLCreateDevice") ||
        check(ID3D12Device_CreateCommandQueue(device, &queue_desc, &IID_ID3D12CommandQueue, (void **)&queue),
              "CreateCommandQueue") ||
        check(ID3D12Device_CreateCommandAllocator(device, D3D12_COMMAND_LIST_TYPE_DIRECT, &IID_ID3D12CommandAllocator,
                                                  (void **)&allocator),
              "CreateCommandAllocator") ||
        check(ID3D12Device_CreateCommandList(device, 0, D3D12_COMMAND_LIST_TYPE_DIRECT, allocator, NULL,
                                             &IID_ID3D12GraphicsCommandList, (void **)&list),
              "CreateCommandList") ||
        check(ID3D12GraphicsCommandList_Close(list), "Close") ||
        check(ID3D12Device_CreateFence(device, 0, D3D12_FENCE_FLAG_NONE, &IID_ID3D12Fence, (void **)&fence),
              "CreateFence") ||
        check(ID3D12Device_CreateDescriptorHeap(device, &heap_desc, &IID_ID3D12DescriptorHeap, (void **)&heap),
              "CreateDescriptorHeap") ||
        check(dml->lpVtbl->CreateCommandRecorder(dml, &IID_IDMLCommandRecorder, (void **)&recorder),
              "CreateCommandRecorder"))
        return -1;
    fence_event = CreateEventA(NULL, FALSE, FALSE, NULL);
    descriptor_size = ID3D12Device_GetDescriptorHandleIncrementSize(device, D3D12_DESCRIPTOR_HEAP_TYPE_CBV_SRV_UAV);
    return 0;
}

/* DirectML's highest feature level on this device, asked among every level up to 6.4 (DirectML 1.15). */
static int feature_level(char *text, size_t size) {
    static const int levels[] = {0x1000, 0x2000, 0x2100, 0x3000, 0x3100, 0x4000, 0x4100, 0x5000,
                                 0x5100, 0x5200, 0x6000, 0x6100, 0x6200, 0x6300, 0x6400};
    DML_FEATURE_QUERY_FEATURE_LEVELS query = {sizeof levels / sizeof *levels, levels};
    DML_FEATURE_DATA_FEATURE_LEVELS data = {0};
    if (check(dml->lpVtbl->CheckFeatureSupport(dml, DML_FEATURE_FEATURE_LEVELS, sizeof query, &query, sizeof data, &data),
              "CheckFeatureSupport"))
        return -1;
    snprintf(text, size, "%d.%d", data.MaxSupportedFeatureLevel >> 12, (data.MaxSupportedFeatureLevel >> 8) & 15);
    return 0;
}

static int handle(const char *line) {
    if (strncmp(line, "cases ", 6) != 0) return 0;
    cases(line + 6);
    return 1;
}

int main(int argc, char **argv) {
    char text[32];
    if (begin(argc, "usage: direct.exe <folder of DirectML.dll>")) return 2;
    if (start(argv[1]) || feature_level(text, sizeof text)) {
        reply("error", failure);
        return 1;
    }
    reply("ok", text);
    serve(handle);
    reply("ok", "");
    return 0;
}
