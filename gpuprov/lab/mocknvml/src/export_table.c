/*
 * export_table.c - nvmlInternalGetExportTable, as the real nvidia-smi needs it.
 *
 * nvidia-smi does not trust a libnvidia-ml.so.1 that lacks NVIDIA's private
 * export table: without it, it prints "Mismatch in versions between
 * nvidia-smi and NVML" and exits.  It asks for one table (by a 16-byte id)
 * whose first word is the table size in bytes and whose other words are
 * function pointers to internal entry points.  Their prototypes are not
 * public; what is known was learnt by watching which slots nvidia-smi calls
 * (set GPUPROV_MOCK_NVML_TRACE=1 to see them):
 *
 *   slot 81       handle by index: (unsigned index, nvmlDevice_t *out, flags)
 *   slots 213-215 running processes: (nvmlDevice_t, unsigned *count in/out,
 *                 entries *): answered with 0 entries (the mock runs none)
 *   slot 26       called with nvidia-smi's own strings; ignored
 *   other slots   with a device handle as first argument (host max PCIe
 *                 generation, power readings, T.Limit...): NOT_SUPPORTED,
 *                 shown as N/A; without one: SUCCESS, untouched
 *
 * Every slot gets its own trampoline so that the dispatcher knows which one
 * was called.
 */
#include <stdint.h>
#include <string.h>

#include "mock_internal.h"

#define SLOTS 256
#define SLOT_HANDLE_BY_INDEX 81
#define SLOT_PROCESSES_FIRST 213
#define SLOT_PROCESSES_LAST 215

/* The id nvidia-smi 470-580 asks for. */
static const unsigned char smi_table_id[16] = {
    0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e, 0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4,
};

static nvmlReturn_t dispatch(unsigned int slot, void *a0, void *a1, void *a2, void *a3)
{
    mock_trace("export slot %u (%p, %p, %p, %p)", slot, a0, a1, a2, a3);
    if (slot == SLOT_HANDLE_BY_INDEX) {
        uintptr_t index = (uintptr_t)a0;
        if (a1 == NULL || index > UINT32_MAX)
            return NVML_ERROR_INVALID_ARGUMENT;
        return mock_handle_by_index((unsigned int)index, (nvmlDevice_t *)a1);
    }
    if (slot >= SLOT_PROCESSES_FIRST && slot <= SLOT_PROCESSES_LAST && mock_is_device(a0) && a1 != NULL) {
        *(unsigned int *)a1 = 0;
        return NVML_SUCCESS;
    }
    /* Any other internal query about a device: the mock has no answer, and
     * NOT_SUPPORTED makes nvidia-smi print N/A instead of reading an output
     * buffer nobody filled. */
    if (mock_is_device(a0))
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

#define TRAMPOLINE(hi, lo)                                                              \
    static nvmlReturn_t slot_##hi##_##lo(void *a0, void *a1, void *a2, void *a3)        \
    {                                                                                   \
        return dispatch((hi) * 16 + (lo), a0, a1, a2, a3);                              \
    }
#define ADDRESS(hi, lo) (void *)slot_##hi##_##lo,
#define ROW(M, hi)                                                                      \
    M(hi, 0) M(hi, 1) M(hi, 2) M(hi, 3) M(hi, 4) M(hi, 5) M(hi, 6) M(hi, 7) M(hi, 8)    \
    M(hi, 9) M(hi, 10) M(hi, 11) M(hi, 12) M(hi, 13) M(hi, 14) M(hi, 15)
#define ALL_SLOTS(M)                                                                    \
    ROW(M, 0) ROW(M, 1) ROW(M, 2) ROW(M, 3) ROW(M, 4) ROW(M, 5) ROW(M, 6) ROW(M, 7)     \
    ROW(M, 8) ROW(M, 9) ROW(M, 10) ROW(M, 11) ROW(M, 12) ROW(M, 13) ROW(M, 14) ROW(M, 15)

ALL_SLOTS(TRAMPOLINE)

/* Slot 0 is overwritten with the table size below. */
static void *table[SLOTS] = {ALL_SLOTS(ADDRESS)};

MOCK_API nvmlReturn_t nvmlInternalGetExportTable(const void **ppExportTable, const void *tableId)
{
    if (ppExportTable == NULL || tableId == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memcmp(tableId, smi_table_id, sizeof(smi_table_id)) != 0) {
        mock_trace("nvmlInternalGetExportTable: unknown table id");
        return NVML_ERROR_NOT_SUPPORTED;
    }
    table[0] = (void *)(uintptr_t)sizeof(table);
    *ppExportTable = table;
    return NVML_SUCCESS;
}
