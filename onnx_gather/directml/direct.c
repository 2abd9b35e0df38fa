/* direct.exe: DirectML's gather operators called directly (DirectML.dll, no ONNX Runtime), for onnx-gather.
 *
 * Built for Windows (mingw-w64) by `onnx-gather setup-directml` beside runner.exe and run under Wine by
 * onnx_gather.directml.direct. Same framing as runner.exe: one request per line on stdin, answered by zero or more
 * "#R info ..." lines and one final "#R ok ..." or "#R error ..." line on stdout.
 *
 *   (at start)                -> ok <the highest DirectML feature level of the device, e.g. 6.4>
 *   cases <folder> <count>    -> for k in 0..count-1 the case in <folder>/<k>/: info case <k> ok (output.bin written
 *                                there) or info case <k> refused <create|compile|init|run> 0x<HRESULT>; then ok <count>
 *   quit                      -> ok, then the process ends
 *
 * A case folder holds desc.txt (the operator, its attributes, the descs of the input, indices and output tensors and
 * the byte the output buffer is filled with before the dispatch), input.bin and indices.bin (each tensor's whole
 * buffer, exactly its TotalTensorSizeInBytes). output.bin is the output buffer read back whole. A malformed case
 * is "error" for the whole request; what DirectML (or Direct3D 12 under it) refuses is the case's answer.
 *
 * One device, command queue, command list and shader-visible descriptor heap serve the whole process: under vkd3d a
 * shader-visible heap costs about 0.5 s and 1.5 GB to create. Everything else is made and released per case.
 */
#define COBJMACROS
#define INITGUID
#include <d3d12.h>
#include <fcntl.h>
#include <io.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

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
 * same and BatchDimensionCount): three tensor descs, then each operator's UINTs in this order. */
typedef struct { const TypedDesc *Input, *Indices, *Output; UINT Attributes[3]; } GatherDesc;

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

static const struct { const char *name; int type; const char *attributes[3]; } operators[] = {
    {"GATHER", 67, {"axis", "index_dimensions"}},
    {"GATHER_ELEMENTS", 107, {"axis"}},
    {"GATHER_ND", 108, {"input_dimension_count", "indices_dimension_count"}},
    {"GATHER_ND1", 140, {"input_dimension_count", "indices_dimension_count", "batch_dimension_count"}},
};
static const char *const data_types[] = {"UNKNOWN", "FLOAT32", "FLOAT16", "UINT32", "UINT16", "UINT8", "INT32",
                                         "INT16", "INT8", "FLOAT64", "UINT64", "INT64"}; /* by their values */

typedef struct {
    UINT sizes[MAX_DIMS], strides[MAX_DIMS];
    int strided;
    DML_BUFFER_TENSOR_DESC buffer;
    TypedDesc desc;
} Tensor;

typedef struct {
    int type;
    GatherDesc gather;
    Tensor tensors[3];
    int fill;
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
static char failure[4096];

static void reply(const char *kind, const char *text) {
    printf("#R %s ", kind);
    for (const char *c = text; *c; c++) putchar(*c == '\n' || *c == '\r' ? ' ' : *c);
    putchar('\n');
    fflush(stdout);
}

static FILE *open_in(const char *folder, int k, const char *name, const char *mode) {
    char path[4096];
    wchar_t wide_path[4096], wide_mode[8];
    snprintf(path, sizeof path, "%s/%d/%s", folder, k, name);
    if (!MultiByteToWideChar(CP_UTF8, 0, path, -1, wide_path, 4096) || !MultiByteToWideChar(CP_UTF8, 0, mode, -1, wide_mode, 8))
        return NULL;
    return _wfopen(wide_path, wide_mode);
}

/* The next whitespace-separated word of desc.txt, which must be `expected` if that is given. */
static int word(FILE *file, char *text, const char *expected) {
    if (fscanf(file, "%63s", text) != 1) return snprintf(failure, sizeof failure, "desc.txt ends early"), -1;
    if (expected && strcmp(text, expected) != 0)
        return snprintf(failure, sizeof failure, "desc.txt: '%s' where '%s' belongs", text, expected), -1;
    return 0;
}

static int number(FILE *file, UINT64 *value, UINT64 maximum) {
    char text[64], *end;
    if (word(file, text, NULL)) return -1;
    *value = _strtoui64(text, &end, 10);
    if (*end || text[0] == '-' || *value > maximum)
        return snprintf(failure, sizeof failure, "desc.txt: '%s' is not a number up to %llu", text, maximum), -1;
    return 0;
}

static int read_tensor(FILE *file, Tensor *t) {
    char text[64];
    UINT64 value, dims;
    if (word(file, text, "tensor") || word(file, text, NULL)) return -1;
    t->buffer.DataType = 0;
    for (int type = 1; type < (int)(sizeof data_types / sizeof *data_types); type++)
        if (strcmp(text, data_types[type]) == 0) t->buffer.DataType = type;
    if (!t->buffer.DataType) return snprintf(failure, sizeof failure, "desc.txt: unknown data type '%s'", text), -1;
    if (number(file, &dims, MAX_DIMS)) return -1;
    for (UINT64 d = 0; d < dims; d++) {
        if (number(file, &value, UINT32_MAX)) return -1;
        t->sizes[d] = (UINT)value;
    }
    if (word(file, text, "strides") || number(file, &value, MAX_DIMS)) return -1;
    if (value != 0 && value != dims) return snprintf(failure, sizeof failure, "desc.txt: %llu strides for %llu sizes", value, dims), -1;
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
    if (op == sizeof operators / sizeof *operators) return snprintf(failure, sizeof failure, "desc.txt: unknown operator '%s'", text), -1;
    c->type = operators[op].type;
    memset(&c->gather, 0, sizeof c->gather);
    for (int a = 0; a < 3 && operators[op].attributes[a]; a++) {
        if (word(file, text, operators[op].attributes[a]) || number(file, &value, UINT32_MAX)) return -1;
        c->gather.Attributes[a] = (UINT)value;
    }
    for (int t = 0; t < 3; t++)
        if (read_tensor(file, &c->tensors[t])) return -1;
    if (word(file, text, "fill") || number(file, &value, 255)) return -1;
    c->fill = (int)value;
    c->gather.Input = &c->tensors[0].desc;
    c->gather.Indices = &c->tensors[1].desc;
    c->gather.Output = &c->tensors[2].desc;
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
    if (!file) return snprintf(failure, sizeof failure, "case %d: cannot open %s", k, name), -1;
    int ok = fread(data, 1, bytes, file) == bytes && fgetc(file) == EOF;
    fclose(file);
    if (!ok) return snprintf(failure, sizeof failure, "case %d: %s does not hold exactly %llu bytes", k, name, bytes), -1;
    return 0;
}

/* What a case made on the device; released after it, whatever happened. */
typedef struct {
    IUnknown *op;
    Dispatchable *compiled, *initializer;
    BindingTable *table;
    ID3D12Resource *buffers[3], *upload, *readback, *persistent, *temporary;
} Objects;

static void release_all(Objects *o) {
    IUnknown *all[] = {(IUnknown *)o->table, (IUnknown *)o->initializer, (IUnknown *)o->compiled, o->op,
                       (IUnknown *)o->buffers[0], (IUnknown *)o->buffers[1], (IUnknown *)o->buffers[2],
                       (IUnknown *)o->upload, (IUnknown *)o->readback, (IUnknown *)o->persistent,
                       (IUnknown *)o->temporary};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i]) IUnknown_Release(all[i]);
}

static UINT64 buffer_size(const Tensor *t) { /* D3D12 has no empty buffer; DirectML judges the desc's total */
    return t->buffer.TotalTensorSizeInBytes ? t->buffer.TotalTensorSizeInBytes : 4;
}

static TypedDesc binding_of(DML_BUFFER_BINDING *binding, ID3D12Resource *buffer, UINT64 size) {
    *binding = (DML_BUFFER_BINDING){buffer, 0, size};
    return (TypedDesc){DML_BINDING_TYPE_BUFFER, binding};
}

/* Records and runs the initializer and the operator; the refusing stage and HRESULT, or NULL with output.bin
 * written. Returns -1 (with `failure`) for a malformed case. */
static int run_case(const char *folder, int k, const Case *c, Objects *o, const char **stage, HRESULT *hr) {
    TypedDesc op_desc = {c->type, &c->gather};
    if (FAILED(*hr = dml->lpVtbl->CreateOperator(dml, &op_desc, &IID_IDMLOperator, (void **)&o->op)))
        return *stage = "create", 0;
    if (FAILED(*hr = dml->lpVtbl->CompileOperator(dml, o->op, 0, &IID_IDMLCompiledOperator, (void **)&o->compiled)))
        return *stage = "compile", 0;
    if (FAILED(*hr = dml->lpVtbl->CreateOperatorInitializer(dml, 1, &o->compiled, &IID_IDMLOperatorInitializer,
                                                           (void **)&o->initializer)))
        return *stage = "init", 0;
    DML_BINDING_PROPERTIES init, exec;
    o->initializer->lpVtbl->GetBindingProperties(o->initializer, &init);
    o->compiled->lpVtbl->GetBindingProperties(o->compiled, &exec);
    if ((UINT64)init.RequiredDescriptorCount + exec.RequiredDescriptorCount > HEAP_DESCRIPTORS)
        return snprintf(failure, sizeof failure, "case %d: DirectML asks for %u + %u descriptors, the heap has %d", k,
                        init.RequiredDescriptorCount, exec.RequiredDescriptorCount, HEAP_DESCRIPTORS), -1;
    UINT64 temporary = max(init.TemporaryResourceSize, exec.TemporaryResourceSize);
    UINT64 sizes[3], offsets[3], staged = 0;
    for (int t = 0; t < 3; t++) sizes[t] = buffer_size(&c->tensors[t]), offsets[t] = staged, staged += sizes[t];
    *stage = "run";
    for (int t = 0; t < 3; t++)
        if (FAILED(*hr = make_buffer(D3D12_HEAP_TYPE_DEFAULT, sizes[t], D3D12_RESOURCE_STATE_COPY_DEST, &o->buffers[t])))
            return 0;
    if (FAILED(*hr = make_buffer(D3D12_HEAP_TYPE_UPLOAD, staged, D3D12_RESOURCE_STATE_GENERIC_READ, &o->upload)) ||
        FAILED(*hr = make_buffer(D3D12_HEAP_TYPE_READBACK, sizes[2], D3D12_RESOURCE_STATE_COPY_DEST, &o->readback)) ||
        (exec.PersistentResourceSize &&
         FAILED(*hr = make_buffer(D3D12_HEAP_TYPE_DEFAULT, exec.PersistentResourceSize,
                                  D3D12_RESOURCE_STATE_UNORDERED_ACCESS, &o->persistent))) ||
        (temporary && FAILED(*hr = make_buffer(D3D12_HEAP_TYPE_DEFAULT, temporary, D3D12_RESOURCE_STATE_UNORDERED_ACCESS,
                                                &o->temporary))))
        return 0;
    unsigned char *staging;
    if (FAILED(*hr = ID3D12Resource_Map(o->upload, 0, NULL, (void **)&staging))) return 0;
    int bad = read_exactly(folder, k, "input.bin", staging, c->tensors[0].buffer.TotalTensorSizeInBytes) ||
              read_exactly(folder, k, "indices.bin", staging + offsets[1], c->tensors[1].buffer.TotalTensorSizeInBytes);
    memset(staging + offsets[2], c->fill, sizes[2]);
    ID3D12Resource_Unmap(o->upload, 0, NULL);
    if (bad) return -1;

    DML_BINDING_TABLE_DESC table = table_desc(o->initializer, 0, init.RequiredDescriptorCount);
    if (FAILED(*hr = dml->lpVtbl->CreateBindingTable(dml, &table, &IID_IDMLBindingTable, (void **)&o->table)))
        return 0;
    DML_BUFFER_BINDING buffers[3], persistent, scratch;
    TypedDesc inputs[2] = {binding_of(&buffers[0], o->buffers[0], sizes[0]), binding_of(&buffers[1], o->buffers[1], sizes[1])};
    TypedDesc output = binding_of(&buffers[2], o->buffers[2], sizes[2]);
    TypedDesc persistent_binding = binding_of(&persistent, o->persistent, exec.PersistentResourceSize);
    TypedDesc temporary_binding = binding_of(&scratch, o->temporary, temporary);

    if (FAILED(*hr = ID3D12CommandAllocator_Reset(allocator)) ||
        FAILED(*hr = ID3D12GraphicsCommandList_Reset(list, allocator, NULL)))
        return 0;
    for (int t = 0; t < 3; t++) {
        ID3D12GraphicsCommandList_CopyBufferRegion(list, o->buffers[t], 0, o->upload, offsets[t], sizes[t]);
        barrier(o->buffers[t], D3D12_RESOURCE_STATE_COPY_DEST, D3D12_RESOURCE_STATE_UNORDERED_ACCESS);
    }
    ID3D12GraphicsCommandList_SetDescriptorHeaps(list, 1, &heap);
    /* The initializer's output is the operator's persistent resource. */
    if (init.TemporaryResourceSize) o->table->lpVtbl->BindTemporaryResource(o->table, &temporary_binding);
    if (o->persistent) o->table->lpVtbl->BindOutputs(o->table, 1, &persistent_binding);
    recorder->lpVtbl->RecordDispatch(recorder, (ID3D12CommandList *)list, o->initializer, o->table);
    barrier(NULL, 0, 0);
    /* The operator's descriptors follow the initializer's: both stay valid until the list has run. */
    table = table_desc(o->compiled, init.RequiredDescriptorCount, exec.RequiredDescriptorCount);
    if (FAILED(*hr = o->table->lpVtbl->Reset(o->table, &table))) {
        ID3D12GraphicsCommandList_Close(list);
        return 0;
    }
    o->table->lpVtbl->BindInputs(o->table, 2, inputs);
    o->table->lpVtbl->BindOutputs(o->table, 1, &output);
    if (exec.TemporaryResourceSize) o->table->lpVtbl->BindTemporaryResource(o->table, &temporary_binding);
    if (o->persistent) o->table->lpVtbl->BindPersistentResource(o->table, &persistent_binding);
    recorder->lpVtbl->RecordDispatch(recorder, (ID3D12CommandList *)list, o->compiled, o->table);
    barrier(o->buffers[2], D3D12_RESOURCE_STATE_UNORDERED_ACCESS, D3D12_RESOURCE_STATE_COPY_SOURCE);
    ID3D12GraphicsCommandList_CopyBufferRegion(list, o->readback, 0, o->buffers[2], 0, sizes[2]);
    if (FAILED(*hr = ID3D12GraphicsCommandList_Close(list))) return 0;

    ID3D12CommandQueue_ExecuteCommandLists(queue, 1, (ID3D12CommandList **)&list);
    if (FAILED(*hr = ID3D12CommandQueue_Signal(queue, fence, ++fence_value))) return 0;
    if (ID3D12Fence_GetCompletedValue(fence) < fence_value) {
        ID3D12Fence_SetEventOnCompletion(fence, fence_value, fence_event);
        WaitForSingleObject(fence_event, INFINITE);
    }
    if (FAILED(*hr = ID3D12Device_GetDeviceRemovedReason(device))) return 0;

    unsigned char *result;
    D3D12_RANGE range = {0, (SIZE_T)sizes[2]};
    if (FAILED(*hr = ID3D12Resource_Map(o->readback, 0, &range, (void **)&result))) return 0;
    FILE *file = open_in(folder, k, "output.bin", "wb");
    UINT64 total = c->tensors[2].buffer.TotalTensorSizeInBytes;
    int written = file && fwrite(result, 1, total, file) == total;
    if (file && fclose(file) != 0) written = 0;
    D3D12_RANGE none = {0, 0};
    ID3D12Resource_Unmap(o->readback, 0, &none);
    if (!written) return snprintf(failure, sizeof failure, "case %d: cannot write output.bin", k), -1;
    *stage = NULL;
    return 0;
}

static void cases(const char *arguments) {
    char folder[4096];
    const char *space = strrchr(arguments, ' ');
    int count = space ? atoi(space + 1) : -1;
    if (!space || count < 0 || (size_t)(space - arguments) >= sizeof folder) return reply("error", "usage: cases <folder> <count>");
    memcpy(folder, arguments, space - arguments);
    folder[space - arguments] = 0;
    for (int k = 0; k < count; k++) {
        Case c;
        Objects objects = {0};
        const char *stage = NULL;
        HRESULT hr = S_OK;
        FILE *file = open_in(folder, k, "desc.txt", "rb");
        int bad = !file;
        if (file) {
            bad = read_case(file, &c);
            fclose(file);
            if (bad) {
                char reason[4096];
                snprintf(reason, sizeof reason, "case %d: %s", k, failure);
                strcpy(failure, reason);
            }
        } else snprintf(failure, sizeof failure, "case %d: cannot open desc.txt", k);
        bad = bad || run_case(folder, k, &c, &objects, &stage, &hr);
        release_all(&objects);
        if (bad) return reply("error", failure);
        char line[128];
        if (stage) snprintf(line, sizeof line, "case %d refused %s 0x%08lx", k, stage, (unsigned long)hr);
        else snprintf(line, sizeof line, "case %d ok", k);
        reply("info", line);
    }
    char line[32];
    snprintf(line, sizeof line, "%d", count);
    reply("ok", line);
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
        return snprintf(failure, sizeof failure, "cannot load D3D12CreateDevice from d3d12.dll or DMLCreateDevice from %s (error %lu)",
                        path, GetLastError()), -1;
    HRESULT hr;
    const char *what = "D3D12CreateDevice";
    D3D12_COMMAND_QUEUE_DESC queue_desc = {D3D12_COMMAND_LIST_TYPE_DIRECT, 0, D3D12_COMMAND_QUEUE_FLAG_NONE, 0};
    D3D12_DESCRIPTOR_HEAP_DESC heap_desc = {D3D12_DESCRIPTOR_HEAP_TYPE_CBV_SRV_UAV, HEAP_DESCRIPTORS,
                                            D3D12_DESCRIPTOR_HEAP_FLAG_SHADER_VISIBLE, 0};
    if (FAILED(hr = create(NULL, D3D_FEATURE_LEVEL_11_0, &IID_ID3D12Device, (void **)&device)) ||
        (what = "DMLCreateDevice", FAILED(hr = create_dml(device, 0, &IID_IDMLDevice, (void **)&dml))) ||
        (what = "CreateCommandQueue",
         FAILED(hr = ID3D12Device_CreateCommandQueue(device, &queue_desc, &IID_ID3D12CommandQueue, (void **)&queue))) ||
        (what = "CreateCommandAllocator",
         FAILED(hr = ID3D12Device_CreateCommandAllocator(device, D3D12_COMMAND_LIST_TYPE_DIRECT,
                                                         &IID_ID3D12CommandAllocator, (void **)&allocator))) ||
        (what = "CreateCommandList",
         FAILED(hr = ID3D12Device_CreateCommandList(device, 0, D3D12_COMMAND_LIST_TYPE_DIRECT, allocator, NULL,
                                                    &IID_ID3D12GraphicsCommandList, (void **)&list))) ||
        (what = "Close", FAILED(hr = ID3D12GraphicsCommandList_Close(list))) ||
        (what = "CreateFence",
         FAILED(hr = ID3D12Device_CreateFence(device, 0, D3D12_FENCE_FLAG_NONE, &IID_ID3D12Fence, (void **)&fence))) ||
        (what = "CreateDescriptorHeap",
         FAILED(hr = ID3D12Device_CreateDescriptorHeap(device, &heap_desc, &IID_ID3D12DescriptorHeap, (void **)&heap))) ||
        (what = "CreateCommandRecorder",
         FAILED(hr = dml->lpVtbl->CreateCommandRecorder(dml, &IID_IDMLCommandRecorder, (void **)&recorder))))
        return snprintf(failure, sizeof failure, "%s failed (0x%08lx)", what, (unsigned long)hr), -1;
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
    HRESULT hr = dml->lpVtbl->CheckFeatureSupport(dml, DML_FEATURE_FEATURE_LEVELS, sizeof query, &query, sizeof data, &data);
    if (FAILED(hr)) return snprintf(failure, sizeof failure, "CheckFeatureSupport failed (0x%08lx)", (unsigned long)hr), -1;
    snprintf(text, size, "%d.%d", data.MaxSupportedFeatureLevel >> 12, (data.MaxSupportedFeatureLevel >> 8) & 15);
    return 0;
}

int main(int argc, char **argv) {
    char text[32], line[8192];
    _setmode(_fileno(stdin), _O_BINARY);
    _setmode(_fileno(stdout), _O_BINARY);
    if (argc != 2) return reply("error", "usage: direct.exe <folder of DirectML.dll>"), 2;
    if (start(argv[1]) || feature_level(text, sizeof text)) return reply("error", failure), 1;
    reply("ok", text);
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\r\n")] = 0;
        if (strncmp(line, "cases ", 6) == 0) cases(line + 6);
        else if (strcmp(line, "quit") == 0) break;
        else reply("error", "unknown request");
    }
    reply("ok", "");
    return 0;
}
