/*
 * nvml_types.h - the NVML C ABI subset the gpuprov mock implements.
 *
 * Written for gpuprov from NVML's documented interface (return codes, enum
 * values and struct layouts as documented for nvml.h and as mirrored by the
 * pynvml ctypes bindings).  Only what the mock needs is declared here; it is
 * not a copy of NVIDIA's header.
 */
#ifndef GPUPROV_MOCKNVML_TYPES_H
#define GPUPROV_MOCKNVML_TYPES_H

/* Return codes (nvmlReturn_t).  The values are ABI: pynvml maps them to its
 * NVMLError_* classes and nvidia-smi maps them to its messages and exit codes. */
typedef int nvmlReturn_t;
#define NVML_SUCCESS                         0
#define NVML_ERROR_UNINITIALIZED             1
#define NVML_ERROR_INVALID_ARGUMENT          2
#define NVML_ERROR_NOT_SUPPORTED             3
#define NVML_ERROR_NO_PERMISSION             4
#define NVML_ERROR_ALREADY_INITIALIZED       5
#define NVML_ERROR_NOT_FOUND                 6
#define NVML_ERROR_INSUFFICIENT_SIZE         7
#define NVML_ERROR_INSUFFICIENT_POWER        8
#define NVML_ERROR_DRIVER_NOT_LOADED         9
#define NVML_ERROR_TIMEOUT                  10
#define NVML_ERROR_IRQ_ISSUE                11
#define NVML_ERROR_LIBRARY_NOT_FOUND        12
#define NVML_ERROR_FUNCTION_NOT_FOUND       13
#define NVML_ERROR_CORRUPTED_INFOROM        14
#define NVML_ERROR_GPU_IS_LOST              15
#define NVML_ERROR_RESET_REQUIRED           16
#define NVML_ERROR_OPERATING_SYSTEM         17
#define NVML_ERROR_LIB_RM_VERSION_MISMATCH  18
#define NVML_ERROR_IN_USE                   19
#define NVML_ERROR_MEMORY                   20
#define NVML_ERROR_NO_DATA                  21
#define NVML_ERROR_VGPU_ECC_NOT_SUPPORTED   22
#define NVML_ERROR_INSUFFICIENT_RESOURCES   23
#define NVML_ERROR_FREQ_NOT_SUPPORTED       24
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25
#define NVML_ERROR_DEPRECATED               26
#define NVML_ERROR_NOT_READY                27
#define NVML_ERROR_GPU_NOT_FOUND            28
#define NVML_ERROR_INVALID_STATE            29
#define NVML_ERROR_UNKNOWN                 999

/* Buffer sizes callers are told to use. */
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE     32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE  16

/* nvmlInitWithFlags flags. */
#define NVML_INIT_FLAG_NO_GPUS    1u
#define NVML_INIT_FLAG_NO_ATTACH  2u

/* Opaque device handle: in the mock it points into the device table. */
typedef struct mock_device *nvmlDevice_t;

/* nvmlPciInfo_t (the layout used by nvmlDeviceGetPciInfo_v2/_v3 and
 * nvmlDeviceGetNvLinkRemotePciInfo_v2): 68 bytes. */
typedef struct {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE]; /* "0000:00:06.0" */
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;    /* device id << 16 | vendor id */
    unsigned int pciSubSystemId; /* subsystem id << 16 | subsystem vendor */
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];          /* "00000000:00:06.0" */
} nvmlPciInfo_t;

/* nvmlMemory_t (v1): used includes memory reserved by the driver. */
typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

/* nvmlMemory_v2_t: versioned; reserved is reported apart from used. */
typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;
#define NVML_STRUCT_VERSION(size, ver) ((unsigned int)(size) | ((unsigned int)(ver) << 24))
#define nvmlMemory_v2 NVML_STRUCT_VERSION(sizeof(nvmlMemory_v2_t), 2)

typedef struct {
    unsigned long long bar1Total;
    unsigned long long bar1Free;
    unsigned long long bar1Used;
} nvmlBAR1Memory_t;

typedef struct {
    unsigned int gpu;    /* percent */
    unsigned int memory; /* percent */
} nvmlUtilization_t;

/* nvmlGpuFabricInfo_t (v1, as used by nvmlDeviceGetGpuFabricInfo). */
#define NVML_GPU_FABRIC_UUID_LEN 16
typedef unsigned char nvmlGpuFabricState_t;
typedef struct {
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    nvmlGpuFabricState_t state;
} nvmlGpuFabricInfo_t;

/* nvmlFieldValue_t: one request/answer of nvmlDeviceGetFieldValues (40 bytes). */
typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    signed long long sllVal;
    signed int siVal;
} nvmlValue_t;
#define NVML_VALUE_TYPE_UNSIGNED_LONG_LONG 3
typedef struct {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;
    long long latencyUsec;
    int valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

/* Enumerations the mock interprets (values as documented). */
#define NVML_TEMPERATURE_GPU            0  /* nvmlTemperatureSensors_t */
#define NVML_CLOCK_GRAPHICS             0  /* nvmlClockType_t */
#define NVML_CLOCK_SM                   1
#define NVML_CLOCK_MEM                  2
#define NVML_CLOCK_VIDEO                3
#define NVML_CLOCK_ID_CURRENT           0  /* nvmlClockId_t */
#define NVML_CLOCK_ID_APP_CLOCK_TARGET  1
#define NVML_CLOCK_ID_APP_CLOCK_DEFAULT 2
#define NVML_CLOCK_ID_CUSTOMER_BOOST_MAX 3
#define NVML_MEMORY_ERROR_TYPE_CORRECTED   0 /* nvmlMemoryErrorType_t */
#define NVML_MEMORY_ERROR_TYPE_UNCORRECTED 1
#define NVML_VOLATILE_ECC               0  /* nvmlEccCounterType_t */
#define NVML_AGGREGATE_ECC              1
#define NVML_MEMORY_LOCATION_DEVICE_MEMORY 2 /* nvmlMemoryLocation_t */
#define NVML_MEMORY_LOCATION_DRAM       8
#define NVML_PCIE_UTIL_TX_BYTES         0  /* nvmlPcieUtilCounter_t */
#define NVML_PCIE_UTIL_RX_BYTES         1
#define NVML_INFOROM_OEM                0  /* nvmlInforomObject_t */
#define NVML_INFOROM_ECC                1
#define NVML_INFOROM_POWER              2
#define NVML_TOPOLOGY_INTERNAL          0  /* nvmlGpuTopologyLevel_t */
#define NVML_TOPOLOGY_SYSTEM           50
#define NVML_P2P_STATUS_OK              0  /* nvmlGpuP2PStatus_t */
#define NVML_P2P_STATUS_NOT_SUPPORTED   5
#define NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR 1

#endif /* GPUPROV_MOCKNVML_TYPES_H */
