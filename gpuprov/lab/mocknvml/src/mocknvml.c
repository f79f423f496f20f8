/*
 * mocknvml.c - gpuprov's simulated libnvidia-ml.so.1.
 *
 * The library answers the NVML C API from a profile instead of a GPU, so that
 * pynvml, the real nvidia-smi and anything else that dlopens
 * libnvidia-ml.so.1 run unchanged in CI and in the lab containers.
 *
 * Profile: a flat "key=value" file compiled from profiles/<name>.yaml by
 * gpuprov.lab.mocknvml.compile_profile().  It is found through, in order:
 *   $GPUPROV_MOCK_NVML_CONF              path of a compiled file
 *   $GPUPROV_MOCK_NVML_PROFILE           a path to a compiled file, or a name
 *                                        looked up as <dir>/<name>.conf with
 *                                        <dir> = $GPUPROV_MOCK_NVML_PROFILE_DIR
 *                                        or /etc/gpuprov/mock-nvml.d
 *   /etc/gpuprov/mock-nvml.conf          what gpuprov.lab.mocknvml.install() writes
 *
 * Overlay: a profile key "overlay=PATH" names a second file of the same form
 * whose keys win over the profile's; it is read at each nvmlInit when present
 * and ignored when absent.  The lab's stand-in driver package ships one with
 * its own system.* versions, so NVML reports the driver that is installed.
 *
 * Value conventions (see docs/mock-nvml.md):
 *   - a missing key means the call returns NVML_ERROR_NOT_SUPPORTED;
 *   - a value "!NAME" (NAME from NVML_ERROR_NAME) makes the call return that
 *     error; an error on a key prefix ("gpu.0.mig_mode") covers every key
 *     below it ("gpu.0.mig_mode.current");
 *   - "gpu.N.lost=handle" makes nvmlDeviceGetHandleBy* fail with
 *     NVML_ERROR_GPU_IS_LOST, "gpu.N.lost=query" hands out the handle and
 *     fails every query on it.
 */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mock_internal.h"

#define MOCK_MAX_DEVICES 64
#define MOCK_KEY_MAX 128
#define DEFAULT_CONF "/etc/gpuprov/mock-nvml.conf"
#define DEFAULT_PROFILE_DIR "/etc/gpuprov/mock-nvml.d"

/* ------------------------------------------------------------------ */
/* Error names and strings                                            */
/* ------------------------------------------------------------------ */

struct error_entry {
    nvmlReturn_t code;
    const char *name;   /* NVML_ERROR_<name> */
    const char *text;   /* what nvmlErrorString returns */
};

static const struct error_entry error_table[] = {
    {NVML_SUCCESS, "SUCCESS", "Success"},
    {NVML_ERROR_UNINITIALIZED, "UNINITIALIZED", "Uninitialized"},
    {NVML_ERROR_INVALID_ARGUMENT, "INVALID_ARGUMENT", "Invalid Argument"},
    {NVML_ERROR_NOT_SUPPORTED, "NOT_SUPPORTED", "Not Supported"},
    {NVML_ERROR_NO_PERMISSION, "NO_PERMISSION", "Insufficient Permissions"},
    {NVML_ERROR_ALREADY_INITIALIZED, "ALREADY_INITIALIZED", "Already Initialized"},
    {NVML_ERROR_NOT_FOUND, "NOT_FOUND", "Not Found"},
    {NVML_ERROR_INSUFFICIENT_SIZE, "INSUFFICIENT_SIZE", "Insufficient Size"},
    {NVML_ERROR_INSUFFICIENT_POWER, "INSUFFICIENT_POWER", "Insufficient External Power"},
    {NVML_ERROR_DRIVER_NOT_LOADED, "DRIVER_NOT_LOADED", "Driver Not Loaded"},
    {NVML_ERROR_TIMEOUT, "TIMEOUT", "Timeout"},
    {NVML_ERROR_IRQ_ISSUE, "IRQ_ISSUE", "Interrupt request issue"},
    {NVML_ERROR_LIBRARY_NOT_FOUND, "LIBRARY_NOT_FOUND", "NVML Shared Library Not Found"},
    {NVML_ERROR_FUNCTION_NOT_FOUND, "FUNCTION_NOT_FOUND", "Function Not Found"},
    {NVML_ERROR_CORRUPTED_INFOROM, "CORRUPTED_INFOROM", "Corrupted infoROM"},
    {NVML_ERROR_GPU_IS_LOST, "GPU_IS_LOST", "GPU is lost"},
    {NVML_ERROR_RESET_REQUIRED, "RESET_REQUIRED", "GPU requires restart"},
    {NVML_ERROR_OPERATING_SYSTEM, "OPERATING_SYSTEM", "The operating system has blocked the request."},
    {NVML_ERROR_LIB_RM_VERSION_MISMATCH, "LIB_RM_VERSION_MISMATCH",
     "RM has detected an NVML/RM version mismatch."},
    {NVML_ERROR_IN_USE, "IN_USE", "In use by another client"},
    {NVML_ERROR_MEMORY, "MEMORY", "Insufficient Memory"},
    {NVML_ERROR_NO_DATA, "NO_DATA", "No data"},
    {NVML_ERROR_VGPU_ECC_NOT_SUPPORTED, "VGPU_ECC_NOT_SUPPORTED",
     "The requested vgpu operation is not available on target device, becasue ECC is enabled"},
    {NVML_ERROR_INSUFFICIENT_RESOURCES, "INSUFFICIENT_RESOURCES", "Ran out of critical resources, other than memory"},
    {NVML_ERROR_FREQ_NOT_SUPPORTED, "FREQ_NOT_SUPPORTED", "The requested frequency is not supported"},
    {NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "ARGUMENT_VERSION_MISMATCH", "The provided version is invalid/unsupported"},
    {NVML_ERROR_DEPRECATED, "DEPRECATED", "The requested functionality has been deprecated"},
    {NVML_ERROR_NOT_READY, "NOT_READY", "The system is not ready for the request"},
    {NVML_ERROR_GPU_NOT_FOUND, "GPU_NOT_FOUND", "No GPUs were found"},
    {NVML_ERROR_INVALID_STATE, "INVALID_STATE", "Resource not in correct state to perform requested operation"},
    {NVML_ERROR_UNKNOWN, "UNKNOWN", "Unknown Error"},
};
#define N_ERRORS (sizeof(error_table) / sizeof(error_table[0]))

const char *mock_error_name(nvmlReturn_t code)
{
    for (size_t i = 0; i < N_ERRORS; i++)
        if (error_table[i].code == code)
            return error_table[i].name;
    return NULL;
}

/* "!GPU_IS_LOST" -> NVML_ERROR_GPU_IS_LOST; unknown names read as UNKNOWN. */
static nvmlReturn_t error_from_value(const char *value)
{
    const char *name = value + 1; /* skip '!' */
    if (strncmp(name, "NVML_ERROR_", 11) == 0)
        name += 11;
    for (size_t i = 0; i < N_ERRORS; i++)
        if (strcmp(error_table[i].name, name) == 0)
            return error_table[i].code;
    return NVML_ERROR_UNKNOWN;
}

MOCK_API const char *nvmlErrorString(nvmlReturn_t result)
{
    for (size_t i = 0; i < N_ERRORS; i++)
        if (error_table[i].code == result)
            return error_table[i].text;
    return "Unknown Error";
}

/* ------------------------------------------------------------------ */
/* Tracing                                                            */
/* ------------------------------------------------------------------ */

void mock_trace(const char *fmt, ...)
{
    static int enabled = -1;
    if (enabled < 0) {
        const char *env = getenv("GPUPROV_MOCK_NVML_TRACE");
        enabled = env != NULL && env[0] != '\0' && strcmp(env, "0") != 0;
    }
    if (!enabled)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("[mocknvml] ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ------------------------------------------------------------------ */
/* Profile store: an array of key/value pairs read from the conf file  */
/* ------------------------------------------------------------------ */

struct entry {
    char *key;
    char *value;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int g_refcount;      /* nvmlInit calls not yet shut down */
static struct entry *g_entries;
static size_t g_n_entries;
static char *g_text;                 /* the file contents; entries point into it */
static struct entry *g_over;         /* the overlay's entries, which win over the profile's */
static size_t g_n_over;
static char *g_over_text;
static char g_conf_path[4096];       /* the profile file loaded, for the MIG state file beside it */
static struct mock_device g_devices[MOCK_MAX_DEVICES];
static unsigned int g_n_devices;

static const char *cfg_get(const char *key)
{
    for (size_t i = 0; i < g_n_over; i++)
        if (strcmp(g_over[i].key, key) == 0)
            return g_over[i].value;
    for (size_t i = 0; i < g_n_entries; i++)
        if (strcmp(g_entries[i].key, key) == 0)
            return g_entries[i].value;
    return NULL;
}

static void cfg_free(void)
{
    mock_mig_unload();
    free(g_entries);
    free(g_text);
    free(g_over);
    free(g_over_text);
    g_entries = NULL;
    g_text = NULL;
    g_over = NULL;
    g_over_text = NULL;
    g_n_entries = 0;
    g_n_over = 0;
    g_n_devices = 0;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* Read and split a conf file into *text and *entries.  Returns 0 on success, -1 when unreadable. */
static int parse_file(const char *path, char **text, struct entry **entries, size_t *n_entries)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return -1;
    }
    long size = ftell(f);
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return -1;
    }
    char *buf = malloc((size_t)size + 1);
    if (buf == NULL) {
        fclose(f);
        return -1;
    }
    size_t got = fread(buf, 1, (size_t)size, f);
    fclose(f);
    buf[got] = '\0';

    size_t lines = 1;
    for (size_t i = 0; i < got; i++)
        if (buf[i] == '\n')
            lines++;
    struct entry *list = calloc(lines, sizeof(*list));
    if (list == NULL) {
        free(buf);
        return -1;
    }
    size_t n = 0;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        char *t = trim(line);
        if (*t == '\0' || *t == '#')
            continue;
        char *eq = strchr(t, '=');
        if (eq == NULL)
            continue;
        *eq = '\0';
        list[n].key = trim(t);
        list[n].value = trim(eq + 1);
        n++;
    }
    *text = buf;
    *entries = list;
    *n_entries = n;
    return 0;
}

/* Load the profile at path, then the overlay it names, if that file exists. */
static int cfg_load_file(const char *path)
{
    snprintf(g_conf_path, sizeof(g_conf_path), "%s", path);
    if (parse_file(path, &g_text, &g_entries, &g_n_entries) != 0)
        return -1;
    mock_trace("loaded %zu profile keys from %s", g_n_entries, path);
    const char *overlay = cfg_get("overlay");
    if (overlay != NULL && overlay[0] != '\0' && parse_file(overlay, &g_over_text, &g_over, &g_n_over) == 0)
        mock_trace("loaded %zu overlay keys from %s", g_n_over, overlay);
    return 0;
}

/* Find the profile (see the header comment) and load it. */
static int cfg_load(void)
{
    char path[4096];
    const char *conf = getenv("GPUPROV_MOCK_NVML_CONF");
    if (conf != NULL && conf[0] != '\0')
        return cfg_load_file(conf);
    const char *profile = getenv("GPUPROV_MOCK_NVML_PROFILE");
    if (profile != NULL && profile[0] != '\0') {
        if (strchr(profile, '/') != NULL)
            return cfg_load_file(profile);
        const char *dir = getenv("GPUPROV_MOCK_NVML_PROFILE_DIR");
        if (dir == NULL || dir[0] == '\0')
            dir = DEFAULT_PROFILE_DIR;
        snprintf(path, sizeof(path), "%s/%s.conf", dir, profile);
        return cfg_load_file(path);
    }
    return cfg_load_file(DEFAULT_CONF);
}

/* ------------------------------------------------------------------ */
/* Typed profile look-ups                                             */
/* ------------------------------------------------------------------ */

/*
 * Look up key; an error recorded on the key or any dotted prefix of it wins.
 * Returns NVML_SUCCESS with *value set, the recorded error, or NOT_SUPPORTED.
 */
static nvmlReturn_t cfg_lookup(const char *key, const char **value)
{
    char prefix[MOCK_KEY_MAX];
    size_t n = strlen(key);
    if (n >= sizeof(prefix))
        return NVML_ERROR_NOT_SUPPORTED;
    memcpy(prefix, key, n + 1);
    for (size_t i = 0; i <= n; i++) {
        if (key[i] != '.' && key[i] != '\0')
            continue;
        prefix[i] = '\0';
        const char *v = cfg_get(prefix);
        if (v != NULL && v[0] == '!')
            return error_from_value(v);
        if (key[i] == '.')
            prefix[i] = '.';
        else if (v != NULL) {
            *value = v;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_SUPPORTED;
}

static nvmlReturn_t parse_ull(const char *key, const char *text, unsigned long long *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 0);
    if (errno != 0 || end == text || *end != '\0') {
        mock_trace("profile key %s: '%s' is not a number", key, text);
        return NVML_ERROR_UNKNOWN;
    }
    *out = v;
    return NVML_SUCCESS;
}

static nvmlReturn_t cfg_ull(const char *key, unsigned long long *out)
{
    const char *text = NULL;
    nvmlReturn_t ret = cfg_lookup(key, &text);
    if (ret != NVML_SUCCESS)
        return ret;
    return parse_ull(key, text, out);
}

static nvmlReturn_t cfg_uint(const char *key, unsigned int *out)
{
    unsigned long long v = 0;
    nvmlReturn_t ret = cfg_ull(key, &v);
    if (ret == NVML_SUCCESS)
        *out = (unsigned int)v;
    return ret;
}

static nvmlReturn_t cfg_int(const char *key, int *out)
{
    const char *text = NULL;
    nvmlReturn_t ret = cfg_lookup(key, &text);
    if (ret != NVML_SUCCESS)
        return ret;
    char *end = NULL;
    long v = strtol(text, &end, 0);
    if (end == text || *end != '\0')
        return NVML_ERROR_UNKNOWN;
    *out = (int)v;
    return NVML_SUCCESS;
}

/* Copy a string value; NVML_ERROR_INSUFFICIENT_SIZE when it does not fit. */
static nvmlReturn_t cfg_str(const char *key, char *buf, unsigned int length)
{
    const char *text = NULL;
    nvmlReturn_t ret = cfg_lookup(key, &text);
    if (ret != NVML_SUCCESS)
        return ret;
    size_t n = strlen(text);
    if (n + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, text, n + 1);
    return NVML_SUCCESS;
}

/* "gpu.<index>.<field>" */
static void dev_key(char *out, size_t size, const struct mock_device *dev, const char *field)
{
    int n = snprintf(out, size, "gpu.%u.%s", dev->index, field);
    if (n < 0 || (size_t)n >= size)
        out[0] = '\0'; /* an over-long key matches nothing: NOT_SUPPORTED */
}

/* ------------------------------------------------------------------ */
/* Argument and state checks shared by every device call               */
/* ------------------------------------------------------------------ */

int mock_is_device(const void *ptr)
{
    const struct mock_device *d = ptr;
    return d >= g_devices && d < g_devices + g_n_devices &&
           ((const char *)d - (const char *)g_devices) % sizeof(*d) == 0;
}

/* Checks NVML performs before any device query, in its order. */
nvmlReturn_t mock_check_device(nvmlDevice_t device)
{
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!mock_is_device(device))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (device->lost_at_query || device->lost_at_handle)
        return NVML_ERROR_GPU_IS_LOST;
    return NVML_SUCCESS;
}

#define CHECK(expr)                         \
    do {                                    \
        nvmlReturn_t check_ret_ = (expr);   \
        if (check_ret_ != NVML_SUCCESS)     \
            return check_ret_;              \
    } while (0)

static nvmlReturn_t dev_ull(nvmlDevice_t dev, const char *field, unsigned long long *out)
{
    char key[MOCK_KEY_MAX];
    CHECK(mock_check_device(dev));
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    dev_key(key, sizeof(key), dev, field);
    return cfg_ull(key, out);
}

nvmlReturn_t mock_dev_uint(nvmlDevice_t dev, const char *field, unsigned int *out)
{
    char key[MOCK_KEY_MAX];
    CHECK(mock_check_device(dev));
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    dev_key(key, sizeof(key), dev, field);
    return cfg_uint(key, out);
}

nvmlReturn_t mock_dev_str(nvmlDevice_t dev, const char *field, char *buf, unsigned int length)
{
    char key[MOCK_KEY_MAX];
    CHECK(mock_check_device(dev));
    if (buf == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    dev_key(key, sizeof(key), dev, field);
    return cfg_str(key, buf, length);
}

const char *mock_conf_path(void)
{
    return g_conf_path;
}

unsigned int mock_device_count(void)
{
    return g_n_devices;
}

struct mock_device *mock_device_at(unsigned int index)
{
    return index < g_n_devices ? &g_devices[index] : NULL;
}

/* Two values that NVML returns together (current/pending, major/minor). */
static nvmlReturn_t dev_pair(nvmlDevice_t dev, const char *first, const char *second, unsigned int *a,
                             unsigned int *b)
{
    if (a == NULL || b == NULL)
        return mock_check_device(dev) != NVML_SUCCESS ? mock_check_device(dev) : NVML_ERROR_INVALID_ARGUMENT;
    unsigned int va = 0, vb = 0;
    CHECK(mock_dev_uint(dev, first, &va));
    CHECK(mock_dev_uint(dev, second, &vb));
    *a = va;
    *b = vb;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Initialisation                                                     */
/* ------------------------------------------------------------------ */

/* Build the device table from gpu.count and gpu.N.lost. */
static void build_devices(void)
{
    unsigned int count = 0;
    if (cfg_uint("gpu.count", &count) != NVML_SUCCESS)
        count = 0;
    if (count > MOCK_MAX_DEVICES)
        count = MOCK_MAX_DEVICES;
    for (unsigned int i = 0; i < count; i++) {
        char key[MOCK_KEY_MAX];
        struct mock_device *d = &g_devices[i];
        memset(d, 0, sizeof(*d));
        d->index = i;
        snprintf(key, sizeof(key), "gpu.%u.lost", i);
        const char *lost = cfg_get(key);
        if (lost != NULL && strcmp(lost, "query") == 0)
            d->lost_at_query = 1;
        else if (lost != NULL && lost[0] != '\0' && strcmp(lost, "no") != 0 && strcmp(lost, "0") != 0)
            d->lost_at_handle = 1;
    }
    g_n_devices = count;
}

static nvmlReturn_t do_init(unsigned int flags, const char *who)
{
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&g_lock);
    if (g_refcount == 0) {
        if (cfg_load() != 0) {
            fprintf(stderr,
                    "gpuprov mock NVML: no profile found (set GPUPROV_MOCK_NVML_CONF or "
                    "GPUPROV_MOCK_NVML_PROFILE, or install %s)\n",
                    DEFAULT_CONF);
            ret = NVML_ERROR_DRIVER_NOT_LOADED;
        } else {
            const char *result = cfg_get("init.result");
            if (result != NULL && result[0] == '!')
                ret = error_from_value(result);
            if (ret == NVML_SUCCESS) {
                build_devices();
                /* Without NVML_INIT_FLAG_NO_GPUS, NVML refuses to start when the
                 * profile says so (init.no_gpus_result); by default it starts
                 * with zero devices, as on a host whose GPUs all failed to init. */
                const char *no_gpus = cfg_get("init.no_gpus_result");
                if (g_n_devices == 0 && !(flags & NVML_INIT_FLAG_NO_GPUS) && no_gpus != NULL &&
                    no_gpus[0] == '!')
                    ret = error_from_value(no_gpus);
            }
            if (ret != NVML_SUCCESS)
                cfg_free();
        }
    }
    if (ret == NVML_SUCCESS && g_refcount++ == 0)
        mock_mig_load(); /* needs the device table and an initialised library */
    pthread_mutex_unlock(&g_lock);
    mock_trace("%s(flags=0x%x) -> %d", who, flags, ret);
    return ret;
}

MOCK_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    return do_init(flags, "nvmlInitWithFlags");
}

MOCK_API nvmlReturn_t nvmlInit_v2(void)
{
    return do_init(0, "nvmlInit_v2");
}

MOCK_API nvmlReturn_t nvmlInit(void)
{
    return do_init(0, "nvmlInit");
}

MOCK_API nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&g_lock);
    if (g_refcount == 0) {
        ret = NVML_ERROR_UNINITIALIZED;
    } else if (--g_refcount == 0) {
        cfg_free();
    }
    pthread_mutex_unlock(&g_lock);
    mock_trace("nvmlShutdown -> %d", ret);
    return ret;
}

/* ------------------------------------------------------------------ */
/* System queries                                                     */
/* ------------------------------------------------------------------ */

MOCK_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (version == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    return cfg_str("system.driver_version", version, length);
}

/* Answers without nvmlInit, like the real library (nvidia-smi asks for it
 * after a failed init to word its version-mismatch message). */
MOCK_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    if (version == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (g_refcount == 0) {
        const char *v = getenv("GPUPROV_MOCK_NVML_LIBRARY_VERSION");
        if (v == NULL)
            return NVML_ERROR_UNINITIALIZED;
        if (strlen(v) + 1 > length)
            return NVML_ERROR_INSUFFICIENT_SIZE;
        memcpy(version, v, strlen(v) + 1);
        return NVML_SUCCESS;
    }
    return cfg_str("system.nvml_version", version, length);
}

MOCK_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    if (cudaDriverVersion == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    return cfg_int("system.cuda_driver_version", cudaDriverVersion);
}

MOCK_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

MOCK_API nvmlReturn_t nvmlUnitGetCount(unsigned int *unitCount)
{
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (unitCount == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *unitCount = 0; /* no S-class units on any profile */
    return NVML_SUCCESS;
}

MOCK_API nvmlReturn_t nvmlGetExcludedDeviceCount(unsigned int *deviceCount)
{
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (deviceCount == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = 0;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Device enumeration and handles                                     */
/* ------------------------------------------------------------------ */

MOCK_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (deviceCount == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = g_n_devices;
    return NVML_SUCCESS;
}

MOCK_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

nvmlReturn_t mock_handle_by_index(unsigned int index, nvmlDevice_t *device)
{
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (device == NULL || index >= g_n_devices)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (g_devices[index].lost_at_handle)
        return NVML_ERROR_GPU_IS_LOST;
    *device = &g_devices[index];
    return NVML_SUCCESS;
}

MOCK_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    return mock_handle_by_index(index, device);
}

MOCK_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return mock_handle_by_index(index, device);
}

/* Handle of the first device whose string field equals value. */
static nvmlReturn_t handle_by_field(const char *field, const char *value, nvmlDevice_t *device)
{
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (value == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < g_n_devices; i++) {
        char key[MOCK_KEY_MAX];
        snprintf(key, sizeof(key), "gpu.%u.%s", i, field);
        const char *v = cfg_get(key);
        if (v != NULL && strcasecmp(v, value) == 0)
            return mock_handle_by_index(i, device);
    }
    return NVML_ERROR_NOT_FOUND;
}

MOCK_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    return handle_by_field("uuid", uuid, device);
}

MOCK_API nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *serial, nvmlDevice_t *device)
{
    return handle_by_field("serial", serial, device);
}

/* Parse "[domain:]bus:device[.function]" (hex) as NVML accepts it. */
static int parse_bus_id(const char *text, unsigned int *domain, unsigned int *bus, unsigned int *dev,
                        unsigned int *fn)
{
    unsigned int a = 0, b = 0, c = 0, d = 0;
    if (sscanf(text, "%x:%x:%x.%x", &a, &b, &c, &d) == 4) {
        *domain = a, *bus = b, *dev = c, *fn = d;
        return 0;
    }
    if (sscanf(text, "%x:%x.%x", &b, &c, &d) == 3) {
        *domain = 0, *bus = b, *dev = c, *fn = d;
        return 0;
    }
    if (sscanf(text, "%x:%x:%x", &a, &b, &c) == 3) {
        *domain = a, *bus = b, *dev = c, *fn = 0;
        return 0;
    }
    return -1;
}

MOCK_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    unsigned int dom, bus, dev, fn;
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (pciBusId == NULL || device == NULL || parse_bus_id(pciBusId, &dom, &bus, &dev, &fn) != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < g_n_devices; i++) {
        char key[MOCK_KEY_MAX];
        unsigned int d2, b2, v2, f2;
        snprintf(key, sizeof(key), "gpu.%u.pci.bus_id", i);
        const char *v = cfg_get(key);
        if (v != NULL && parse_bus_id(v, &d2, &b2, &v2, &f2) == 0 && d2 == dom && b2 == bus && v2 == dev &&
            f2 == fn)
            return mock_handle_by_index(i, device);
    }
    return NVML_ERROR_NOT_FOUND;
}

MOCK_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

MOCK_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    CHECK(mock_check_device(device));
    if (index == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = device->index;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Identity                                                           */
/* ------------------------------------------------------------------ */

MOCK_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int length)
{
    return mock_dev_str(d, "name", name, length);
}

MOCK_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int length)
{
    return mock_dev_str(d, "uuid", uuid, length);
}

MOCK_API nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t d, char *serial, unsigned int length)
{
    return mock_dev_str(d, "serial", serial, length);
}

MOCK_API nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t d, char *partNumber, unsigned int length)
{
    return mock_dev_str(d, "board_part_number", partNumber, length);
}

MOCK_API nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t d, char *version, unsigned int length)
{
    return mock_dev_str(d, "vbios_version", version, length);
}

MOCK_API nvmlReturn_t nvmlDeviceGetInforomImageVersion(nvmlDevice_t d, char *version, unsigned int length)
{
    return mock_dev_str(d, "inforom.image_version", version, length);
}

MOCK_API nvmlReturn_t nvmlDeviceGetInforomVersion(nvmlDevice_t d, int object, char *version, unsigned int length)
{
    static const char *const fields[] = {"inforom.oem", "inforom.ecc", "inforom.power"};
    CHECK(mock_check_device(d));
    if (object < NVML_INFOROM_OEM || object > NVML_INFOROM_POWER)
        return NVML_ERROR_INVALID_ARGUMENT;
    return mock_dev_str(d, fields[object], version, length);
}

MOCK_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *minorNumber)
{
    return mock_dev_uint(d, "minor_number", minorNumber);
}

MOCK_API nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t d, int *type)
{
    return mock_dev_uint(d, "brand", (unsigned int *)type);
}

MOCK_API nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t d, unsigned int *arch)
{
    return mock_dev_uint(d, "architecture", arch);
}

MOCK_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor)
{
    return dev_pair(d, "cuda_compute_capability.major", "cuda_compute_capability.minor", (unsigned int *)major,
                    (unsigned int *)minor);
}

MOCK_API nvmlReturn_t nvmlDeviceGetBoardId(nvmlDevice_t d, unsigned int *boardId)
{
    return mock_dev_uint(d, "board_id", boardId);
}

MOCK_API nvmlReturn_t nvmlDeviceGetMultiGpuBoard(nvmlDevice_t d, unsigned int *multiGpuBool)
{
    return mock_dev_uint(d, "multi_gpu_board", multiGpuBool);
}

MOCK_API nvmlReturn_t nvmlDeviceGetModuleId(nvmlDevice_t d, unsigned int *moduleId)
{
    return mock_dev_uint(d, "module_id", moduleId);
}

MOCK_API nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t d, unsigned int *numCores)
{
    return mock_dev_uint(d, "num_gpu_cores", numCores);
}

MOCK_API nvmlReturn_t nvmlDeviceGetMemoryBusWidth(nvmlDevice_t d, unsigned int *busWidth)
{
    return mock_dev_uint(d, "memory_bus_width", busWidth);
}

MOCK_API nvmlReturn_t nvmlDeviceGetGspFirmwareVersion(nvmlDevice_t d, char *version)
{
    /* NVML documents the buffer as NVML_GSP_FIRMWARE_VERSION_BUF_SIZE (64). */
    return mock_dev_str(d, "gsp_firmware_version", version, 64);
}

MOCK_API nvmlReturn_t nvmlDeviceGetGspFirmwareMode(nvmlDevice_t d, unsigned int *isEnabled,
                                                   unsigned int *defaultMode)
{
    return dev_pair(d, "gsp_firmware_mode.enabled", "gsp_firmware_mode.default", isEnabled, defaultMode);
}

/* ------------------------------------------------------------------ */
/* PCI and PCIe                                                       */
/* ------------------------------------------------------------------ */

static nvmlReturn_t fill_pci_info(const char *bus_id_key, const char *device_id_key, const char *subsys_key,
                                  nvmlPciInfo_t *pci)
{
    const char *bus_id = NULL;
    unsigned int dom, bus, dev, fn;
    CHECK(cfg_lookup(bus_id_key, &bus_id));
    if (parse_bus_id(bus_id, &dom, &bus, &dev, &fn) != 0)
        return NVML_ERROR_UNKNOWN;
    memset(pci, 0, sizeof(*pci));
    pci->domain = dom;
    pci->bus = bus;
    pci->device = dev;
    snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.%X", dom, bus, dev, fn);
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.%X", dom & 0xffffu, bus, dev, fn);
    unsigned int v = 0;
    if (device_id_key != NULL && cfg_uint(device_id_key, &v) == NVML_SUCCESS)
        pci->pciDeviceId = v;
    if (subsys_key != NULL && cfg_uint(subsys_key, &v) == NVML_SUCCESS)
        pci->pciSubSystemId = v;
    return NVML_SUCCESS;
}

MOCK_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci)
{
    char k1[MOCK_KEY_MAX], k2[MOCK_KEY_MAX], k3[MOCK_KEY_MAX];
    CHECK(mock_check_device(d));
    if (pci == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    dev_key(k1, sizeof(k1), d, "pci.bus_id");
    dev_key(k2, sizeof(k2), d, "pci.device_id");
    dev_key(k3, sizeof(k3), d, "pci.subsystem_id");
    return fill_pci_info(k1, k2, k3, pci);
}

MOCK_API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(d, pci);
}

MOCK_API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(d, pci);
}

MOCK_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t d, unsigned int *gen)
{
    return mock_dev_uint(d, "pcie.link_gen_current", gen);
}

MOCK_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t d, unsigned int *width)
{
    return mock_dev_uint(d, "pcie.link_width_current", width);
}

MOCK_API nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t d, unsigned int *gen)
{
    return mock_dev_uint(d, "pcie.link_gen_max", gen);
}

MOCK_API nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t d, unsigned int *width)
{
    return mock_dev_uint(d, "pcie.link_width_max", width);
}

MOCK_API nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t d, unsigned int *gen)
{
    return mock_dev_uint(d, "pcie.link_gen_gpu_max", gen);
}

MOCK_API nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t d, unsigned int *value)
{
    return mock_dev_uint(d, "pcie.replay_counter", value);
}

MOCK_API nvmlReturn_t nvmlDeviceGetPcieLinkMaxSpeed(nvmlDevice_t d, unsigned int *maxSpeed)
{
    return mock_dev_uint(d, "pcie.link_max_speed", maxSpeed);
}

MOCK_API nvmlReturn_t nvmlDeviceGetPcieSpeed(nvmlDevice_t d, unsigned int *pcieSpeed)
{
    return mock_dev_uint(d, "pcie.speed", pcieSpeed);
}

MOCK_API nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, int counter, unsigned int *value)
{
    CHECK(mock_check_device(d));
    if (counter == NVML_PCIE_UTIL_TX_BYTES)
        return mock_dev_uint(d, "pcie.tx_kbps", value);
    if (counter == NVML_PCIE_UTIL_RX_BYTES)
        return mock_dev_uint(d, "pcie.rx_kbps", value);
    return NVML_ERROR_INVALID_ARGUMENT;
}

/* ------------------------------------------------------------------ */
/* Memory                                                             */
/* ------------------------------------------------------------------ */

/* Profile keys: memory.total, memory.reserved (driver), memory.used (apps). */
static nvmlReturn_t read_memory(nvmlDevice_t d, unsigned long long *total, unsigned long long *reserved,
                                unsigned long long *used)
{
    CHECK(dev_ull(d, "memory.total", total));
    if (dev_ull(d, "memory.reserved", reserved) != NVML_SUCCESS)
        *reserved = 0;
    if (dev_ull(d, "memory.used", used) != NVML_SUCCESS)
        *used = 0;
    if (*reserved + *used > *total)
        return NVML_ERROR_UNKNOWN;
    return NVML_SUCCESS;
}

MOCK_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *memory)
{
    unsigned long long total, reserved, used;
    CHECK(mock_check_device(d));
    if (memory == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    CHECK(read_memory(d, &total, &reserved, &used));
    /* The v1 structure counts the driver's reservation as used. */
    memory->total = total;
    memory->used = reserved + used;
    memory->free = total - reserved - used;
    return NVML_SUCCESS;
}

MOCK_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *memory)
{
    unsigned long long total, reserved, used;
    CHECK(mock_check_device(d));
    if (memory == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    CHECK(read_memory(d, &total, &reserved, &used));
    memory->total = total;
    memory->reserved = reserved;
    memory->used = used;
    memory->free = total - reserved - used;
    return NVML_SUCCESS;
}

MOCK_API nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t d, nvmlBAR1Memory_t *bar1)
{
    unsigned long long total = 0, used = 0;
    CHECK(mock_check_device(d));
    if (bar1 == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    CHECK(dev_ull(d, "bar1.total", &total));
    if (dev_ull(d, "bar1.used", &used) != NVML_SUCCESS || used > total)
        used = 0;
    bar1->bar1Total = total;
    bar1->bar1Used = used;
    bar1->bar1Free = total - used;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Modes                                                              */
/* ------------------------------------------------------------------ */

MOCK_API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t d, int *mode)
{
    return mock_dev_uint(d, "persistence_mode", (unsigned int *)mode);
}

MOCK_API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *isMigDevice)
{
    CHECK(mock_check_device(d));
    if (isMigDevice == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isMigDevice = 0; /* the mock exposes no MIG devices */
    return NVML_SUCCESS;
}

MOCK_API nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t d, int *current, int *pending)
{
    return dev_pair(d, "ecc_mode.current", "ecc_mode.pending", (unsigned int *)current, (unsigned int *)pending);
}

MOCK_API nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t d, int *display)
{
    return mock_dev_uint(d, "display_mode", (unsigned int *)display);
}

MOCK_API nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t d, int *isActive)
{
    return mock_dev_uint(d, "display_active", (unsigned int *)isActive);
}

MOCK_API nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t d, int *mode)
{
    return mock_dev_uint(d, "compute_mode", (unsigned int *)mode);
}

MOCK_API nvmlReturn_t nvmlDeviceGetGpuOperationMode(nvmlDevice_t d, int *current, int *pending)
{
    return dev_pair(d, "gpu_operation_mode.current", "gpu_operation_mode.pending", (unsigned int *)current,
                    (unsigned int *)pending);
}

MOCK_API nvmlReturn_t nvmlDeviceGetAccountingMode(nvmlDevice_t d, int *mode)
{
    return mock_dev_uint(d, "accounting_mode", (unsigned int *)mode);
}

MOCK_API nvmlReturn_t nvmlDeviceGetAccountingBufferSize(nvmlDevice_t d, unsigned int *bufferSize)
{
    return mock_dev_uint(d, "accounting_buffer_size", bufferSize);
}

MOCK_API nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t d, int *mode)
{
    return mock_dev_uint(d, "virtualization_mode", (unsigned int *)mode);
}

MOCK_API nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t d, int *pState)
{
    return mock_dev_uint(d, "performance_state", (unsigned int *)pState);
}

MOCK_API nvmlReturn_t nvmlDeviceGetPowerState(nvmlDevice_t d, int *pState)
{
    return mock_dev_uint(d, "performance_state", (unsigned int *)pState);
}

MOCK_API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *reasons)
{
    return dev_ull(d, "clocks_event_reasons", reasons);
}

MOCK_API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *reasons)
{
    return dev_ull(d, "clocks_event_reasons", reasons);
}

MOCK_API nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t d, unsigned long long *reasons)
{
    return dev_ull(d, "supported_clocks_event_reasons", reasons);
}

MOCK_API nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t d, unsigned long long *reasons)
{
    return dev_ull(d, "supported_clocks_event_reasons", reasons);
}

/* ------------------------------------------------------------------ */
/* ECC and memory health                                              */
/* ------------------------------------------------------------------ */

static const char *ecc_counter_name(int counterType)
{
    return counterType == NVML_VOLATILE_ECC ? "volatile" : counterType == NVML_AGGREGATE_ECC ? "aggregate" : NULL;
}

static const char *ecc_type_name(int errorType)
{
    return errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED     ? "corrected"
           : errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED ? "uncorrected"
                                                             : NULL;
}

MOCK_API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int errorType, int counterType,
                                                  unsigned long long *eccCounts)
{
    char field[MOCK_KEY_MAX];
    CHECK(mock_check_device(d));
    const char *counter = ecc_counter_name(counterType), *type = ecc_type_name(errorType);
    if (counter == NULL || type == NULL || eccCounts == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(field, sizeof(field), "ecc_errors.%s.%s", counter, type);
    return dev_ull(d, field, eccCounts);
}

/* Per-location counts: DRAM / device memory carry the profile's totals,
 * other locations read as zero wherever ECC counting is supported. */
MOCK_API nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t d, int errorType, int counterType,
                                                      int locationType, unsigned long long *count)
{
    unsigned long long total = 0;
    CHECK(nvmlDeviceGetTotalEccErrors(d, errorType, counterType, &total));
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = (locationType == NVML_MEMORY_LOCATION_DEVICE_MEMORY || locationType == NVML_MEMORY_LOCATION_DRAM)
                 ? total
                 : 0;
    return NVML_SUCCESS;
}

MOCK_API nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t d, int cause, unsigned int *pageCount,
                                                unsigned long long *addresses)
{
    char field[MOCK_KEY_MAX];
    unsigned int n = 0;
    CHECK(mock_check_device(d));
    if (pageCount == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(field, sizeof(field), "retired_pages.%s",
             cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR ? "double_bit" : "single_bit");
    CHECK(mock_dev_uint(d, field, &n));
    if (*pageCount < n) {
        *pageCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n && addresses != NULL; i++)
        addresses[i] = 0x1000ull * (i + 1); /* synthetic page addresses */
    *pageCount = n;
    return NVML_SUCCESS;
}

MOCK_API nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t d, int cause, unsigned int *pageCount,
                                                   unsigned long long *addresses, unsigned long long *timestamps)
{
    unsigned int before = pageCount != NULL ? *pageCount : 0;
    nvmlReturn_t ret = nvmlDeviceGetRetiredPages(d, cause, pageCount, addresses);
    if (ret == NVML_SUCCESS && timestamps != NULL)
        for (unsigned int i = 0; i < *pageCount && i < before; i++)
            timestamps[i] = 0;
    return ret;
}

MOCK_API nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t d, int *isPending)
{
    return mock_dev_uint(d, "retired_pages.pending", (unsigned int *)isPending);
}

MOCK_API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int *corrRows, unsigned int *uncRows,
                                                unsigned int *isPending, unsigned int *failureOccurred)
{
    unsigned int c = 0, u = 0, p = 0, f = 0;
    CHECK(mock_check_device(d));
    if (corrRows == NULL || uncRows == NULL || isPending == NULL || failureOccurred == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    CHECK(mock_dev_uint(d, "remapped_rows.correctable", &c));
    CHECK(mock_dev_uint(d, "remapped_rows.uncorrectable", &u));
    CHECK(mock_dev_uint(d, "remapped_rows.pending", &p));
    CHECK(mock_dev_uint(d, "remapped_rows.failure", &f));
    *corrRows = c, *uncRows = u, *isPending = p, *failureOccurred = f;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Power, thermal, clocks, utilisation, fans                          */
/* ------------------------------------------------------------------ */

MOCK_API nvmlReturn_t nvmlDeviceGetPowerManagementMode(nvmlDevice_t d, int *mode)
{
    return mock_dev_uint(d, "power.management", (unsigned int *)mode);
}

MOCK_API nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t d, unsigned int *limit)
{
    return mock_dev_uint(d, "power.limit", limit);
}

MOCK_API nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t d, unsigned int *defaultLimit)
{
    return mock_dev_uint(d, "power.default_limit", defaultLimit);
}

MOCK_API nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t d, unsigned int *minLimit,
                                                                   unsigned int *maxLimit)
{
    return dev_pair(d, "power.min_limit", "power.max_limit", minLimit, maxLimit);
}

MOCK_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *limit)
{
    return mock_dev_uint(d, "power.enforced_limit", limit);
}

MOCK_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *power)
{
    return mock_dev_uint(d, "power.usage", power);
}

MOCK_API nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *energy)
{
    return dev_ull(d, "power.total_energy_mj", energy);
}

MOCK_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensorType, unsigned int *temp)
{
    CHECK(mock_check_device(d));
    if (sensorType != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    return mock_dev_uint(d, "temperature.gpu", temp);
}

MOCK_API nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t d, int thresholdType, unsigned int *temp)
{
    static const char *const fields[] = {
        "temperature.shutdown", "temperature.slowdown", "temperature.mem_max", "temperature.gpu_max",
        "temperature.acoustic_min", "temperature.acoustic_curr", "temperature.acoustic_max",
    };
    CHECK(mock_check_device(d));
    if (thresholdType < 0 || (size_t)thresholdType >= sizeof(fields) / sizeof(fields[0]))
        return NVML_ERROR_NOT_SUPPORTED;
    return mock_dev_uint(d, fields[thresholdType], temp);
}

static const char *clock_name(int type)
{
    static const char *const names[] = {"graphics", "sm", "mem", "video"};
    return type >= NVML_CLOCK_GRAPHICS && type <= NVML_CLOCK_VIDEO ? names[type] : NULL;
}

static nvmlReturn_t clock_value(nvmlDevice_t d, const char *group, int type, unsigned int *mhz)
{
    char field[MOCK_KEY_MAX];
    CHECK(mock_check_device(d));
    const char *name = clock_name(type);
    if (name == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(field, sizeof(field), "clocks.%s.%s", group, name);
    return mock_dev_uint(d, field, mhz);
}

MOCK_API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *clock)
{
    return clock_value(d, "current", type, clock);
}

MOCK_API nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, int type, unsigned int *clock)
{
    return clock_value(d, "max", type, clock);
}

MOCK_API nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t d, int type, unsigned int *clockMHz)
{
    return clock_value(d, "applications", type, clockMHz);
}

MOCK_API nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(nvmlDevice_t d, int type, unsigned int *clockMHz)
{
    return clock_value(d, "default_applications", type, clockMHz);
}

MOCK_API nvmlReturn_t nvmlDeviceGetMaxCustomerBoostClock(nvmlDevice_t d, int type, unsigned int *clockMHz)
{
    return clock_value(d, "max_customer_boost", type, clockMHz);
}

MOCK_API nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t d, int type, int id, unsigned int *clockMHz)
{
    static const char *const groups[] = {"current", "applications", "default_applications", "max_customer_boost"};
    CHECK(mock_check_device(d));
    if (id < NVML_CLOCK_ID_CURRENT || id > NVML_CLOCK_ID_CUSTOMER_BOOST_MAX)
        return NVML_ERROR_INVALID_ARGUMENT;
    return clock_value(d, groups[id], type, clockMHz);
}

MOCK_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *utilization)
{
    return dev_pair(d, "utilization.gpu", "utilization.memory", utilization ? &utilization->gpu : NULL,
                    utilization ? &utilization->memory : NULL);
}

static nvmlReturn_t codec_utilization(nvmlDevice_t d, const char *field, unsigned int *util,
                                      unsigned int *samplingPeriodUs)
{
    CHECK(mock_check_device(d));
    if (util == NULL || samplingPeriodUs == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    CHECK(mock_dev_uint(d, field, util));
    *samplingPeriodUs = 167000;
    return NVML_SUCCESS;
}

MOCK_API nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t d, unsigned int *u, unsigned int *p)
{
    return codec_utilization(d, "utilization.encoder", u, p);
}

MOCK_API nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t d, unsigned int *u, unsigned int *p)
{
    return codec_utilization(d, "utilization.decoder", u, p);
}

MOCK_API nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t d, unsigned int *speed)
{
    return mock_dev_uint(d, "fan_speed", speed);
}

MOCK_API nvmlReturn_t nvmlDeviceGetFanSpeed_v2(nvmlDevice_t d, unsigned int fan, unsigned int *speed)
{
    unsigned int fans = 0;
    CHECK(mock_dev_uint(d, "num_fans", &fans));
    if (fan >= fans)
        return NVML_ERROR_INVALID_ARGUMENT;
    return mock_dev_uint(d, "fan_speed", speed);
}

MOCK_API nvmlReturn_t nvmlDeviceGetNumFans(nvmlDevice_t d, unsigned int *numFans)
{
    return mock_dev_uint(d, "num_fans", numFans);
}

/* ------------------------------------------------------------------ */
/* Processes: the mock runs none                                      */
/* ------------------------------------------------------------------ */

static nvmlReturn_t no_processes(nvmlDevice_t d, unsigned int *infoCount)
{
    CHECK(mock_check_device(d));
    if (infoCount == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *infoCount = 0;
    return NVML_SUCCESS;
}

#define NO_PROCESSES(fn)                                                           \
    MOCK_API nvmlReturn_t fn(nvmlDevice_t d, unsigned int *infoCount, void *infos) \
    {                                                                              \
        (void)infos;                                                               \
        return no_processes(d, infoCount);                                         \
    }
NO_PROCESSES(nvmlDeviceGetComputeRunningProcesses)
NO_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v2)
NO_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v3)
NO_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses)
NO_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses_v2)
NO_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses_v3)
NO_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses)
NO_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses_v2)
NO_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses_v3)

/* ------------------------------------------------------------------ */
/* NVLink, topology, affinity, fabric                                 */
/* ------------------------------------------------------------------ */

/* Per-link value: gpu.N.nvlink.<link>.<name>, else gpu.N.nvlink.<name>. */
static nvmlReturn_t nvlink_key(nvmlDevice_t d, unsigned int link, const char *name, char *key, size_t size)
{
    unsigned int count = 0;
    char field[MOCK_KEY_MAX];
    CHECK(mock_check_device(d));
    CHECK(mock_dev_uint(d, "nvlink.count", &count));
    if (link >= count)
        return NVML_ERROR_INVALID_ARGUMENT;
    snprintf(field, sizeof(field), "nvlink.%u.%s", link, name);
    dev_key(key, size, d, field);
    const char *unused = NULL;
    if (cfg_lookup(key, &unused) == NVML_ERROR_NOT_SUPPORTED) {
        snprintf(field, sizeof(field), "nvlink.%s", name);
        dev_key(key, size, d, field);
    }
    return NVML_SUCCESS;
}

MOCK_API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, int *isActive)
{
    char key[MOCK_KEY_MAX];
    if (isActive == NULL)
        return mock_check_device(d) != NVML_SUCCESS ? mock_check_device(d) : NVML_ERROR_INVALID_ARGUMENT;
    CHECK(nvlink_key(d, link, "active", key, sizeof(key)));
    return cfg_uint(key, (unsigned int *)isActive);
}

MOCK_API nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t d, unsigned int link, unsigned int *version)
{
    char key[MOCK_KEY_MAX];
    if (version == NULL)
        return mock_check_device(d) != NVML_SUCCESS ? mock_check_device(d) : NVML_ERROR_INVALID_ARGUMENT;
    CHECK(nvlink_key(d, link, "version", key, sizeof(key)));
    return cfg_uint(key, version);
}

MOCK_API nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t d, unsigned int link, int capability,
                                                    unsigned int *capResult)
{
    char key[MOCK_KEY_MAX];
    if (capResult == NULL)
        return mock_check_device(d) != NVML_SUCCESS ? mock_check_device(d) : NVML_ERROR_INVALID_ARGUMENT;
    CHECK(nvlink_key(d, link, "active", key, sizeof(key)));
    unsigned int active = 0;
    CHECK(cfg_uint(key, &active));
    /* An active link on these boards supports P2P, system memory access and
     * atomics (capabilities 0-3); SLI bridge (4) never; valid (5) = active. */
    *capResult = capability == 4 ? 0 : active;
    return NVML_SUCCESS;
}

MOCK_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int link, nvmlPciInfo_t *pci)
{
    char key[MOCK_KEY_MAX], dev_id[MOCK_KEY_MAX];
    if (pci == NULL)
        return mock_check_device(d) != NVML_SUCCESS ? mock_check_device(d) : NVML_ERROR_INVALID_ARGUMENT;
    CHECK(nvlink_key(d, link, "remote_bus_id", key, sizeof(key)));
    CHECK(nvlink_key(d, link, "remote_device_id", dev_id, sizeof(dev_id)));
    return fill_pci_info(key, dev_id, NULL, pci);
}

MOCK_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t d, unsigned int link, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetNvLinkRemotePciInfo_v2(d, link, pci);
}

MOCK_API nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t d, unsigned int link, int *type)
{
    char key[MOCK_KEY_MAX];
    if (type == NULL)
        return mock_check_device(d) != NVML_SUCCESS ? mock_check_device(d) : NVML_ERROR_INVALID_ARGUMENT;
    CHECK(nvlink_key(d, link, "remote_device_type", key, sizeof(key)));
    return cfg_uint(key, (unsigned int *)type);
}

/* topology.<i>.<j> (either order), else topology.default. */
static nvmlReturn_t pair_value(const char *group, nvmlDevice_t a, nvmlDevice_t b, unsigned int *out)
{
    char key[MOCK_KEY_MAX];
    CHECK(mock_check_device(a));
    CHECK(mock_check_device(b));
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int lo = a->index < b->index ? a->index : b->index;
    unsigned int hi = a->index < b->index ? b->index : a->index;
    snprintf(key, sizeof(key), "%s.%u.%u", group, lo, hi);
    const char *unused = NULL;
    if (cfg_lookup(key, &unused) == NVML_ERROR_NOT_SUPPORTED)
        snprintf(key, sizeof(key), "%s.default", group);
    return cfg_uint(key, out);
}

MOCK_API nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b, int *pathInfo)
{
    if (a == b && mock_check_device(a) == NVML_SUCCESS && pathInfo != NULL) {
        *pathInfo = NVML_TOPOLOGY_INTERNAL;
        return NVML_SUCCESS;
    }
    return pair_value("topology", a, b, (unsigned int *)pathInfo);
}

MOCK_API nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t a, nvmlDevice_t b, int p2pIndex, int *p2pStatus)
{
    (void)p2pIndex;
    if (a == b && mock_check_device(a) == NVML_SUCCESS && p2pStatus != NULL) {
        *p2pStatus = NVML_P2P_STATUS_NOT_SUPPORTED;
        return NVML_SUCCESS;
    }
    return pair_value("p2p", a, b, (unsigned int *)p2pStatus);
}

/* Fill a cpu bitmask (array of unsigned long) from a cpulist such as "0-31,64-95". */
static nvmlReturn_t fill_cpu_mask(const char *list, unsigned int size, unsigned long *mask)
{
    const unsigned int bits = (unsigned int)(8 * sizeof(unsigned long));
    memset(mask, 0, size * sizeof(unsigned long));
    const char *p = list;
    while (*p != '\0') {
        char *end = NULL;
        unsigned long lo = strtoul(p, &end, 10), hi = lo;
        if (end == p)
            return NVML_ERROR_UNKNOWN;
        p = end;
        if (*p == '-') {
            hi = strtoul(p + 1, &end, 10);
            p = end;
        }
        for (unsigned long cpu = lo; cpu <= hi && cpu < (unsigned long)size * bits; cpu++)
            mask[cpu / bits] |= 1ul << (cpu % bits);
        if (*p == ',')
            p++;
        else if (*p != '\0')
            return NVML_ERROR_UNKNOWN;
    }
    return NVML_SUCCESS;
}

MOCK_API nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t d, unsigned int cpuSetSize, unsigned long *cpuSet)
{
    char key[MOCK_KEY_MAX];
    const char *list = NULL;
    CHECK(mock_check_device(d));
    if (cpuSet == NULL || cpuSetSize == 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    dev_key(key, sizeof(key), d, "cpu_affinity");
    CHECK(cfg_lookup(key, &list));
    return fill_cpu_mask(list, cpuSetSize, cpuSet);
}

MOCK_API nvmlReturn_t nvmlDeviceGetCpuAffinityWithinScope(nvmlDevice_t d, unsigned int cpuSetSize,
                                                          unsigned long *cpuSet, unsigned int scope)
{
    (void)scope;
    return nvmlDeviceGetCpuAffinity(d, cpuSetSize, cpuSet);
}

MOCK_API nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t d, unsigned int nodeSetSize, unsigned long *nodeSet,
                                                  unsigned int scope)
{
    char key[MOCK_KEY_MAX];
    const char *list = NULL;
    (void)scope;
    CHECK(mock_check_device(d));
    if (nodeSet == NULL || nodeSetSize == 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    dev_key(key, sizeof(key), d, "memory_affinity");
    CHECK(cfg_lookup(key, &list));
    return fill_cpu_mask(list, nodeSetSize, nodeSet);
}

MOCK_API nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t d, unsigned int *node)
{
    return mock_dev_uint(d, "numa_node", node);
}

MOCK_API nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t d, nvmlGpuFabricInfo_t *info)
{
    unsigned int state = 0, clique = 0;
    CHECK(mock_check_device(d));
    if (info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    CHECK(mock_dev_uint(d, "fabric.state", &state));
    if (mock_dev_uint(d, "fabric.clique_id", &clique) != NVML_SUCCESS)
        clique = 0;
    memset(info, 0, sizeof(*info));
    info->state = (nvmlGpuFabricState_t)state;
    info->cliqueId = clique;
    char key[MOCK_KEY_MAX];
    const char *status = NULL;
    dev_key(key, sizeof(key), d, "fabric.status");
    /* fabric.status names the NVML result of fabric training ("SUCCESS", "!NOT_READY"...). */
    info->status = cfg_get(key) != NULL && (status = cfg_get(key))[0] == '!' ? error_from_value(status)
                                                                             : NVML_SUCCESS;
    return NVML_SUCCESS;
}

/* Used by stubs.c: 1 between nvmlInit and the last nvmlShutdown. */
int mock_initialized(void)
{
    return g_refcount > 0;
}

/* ------------------------------------------------------------------ */
/* Events: sets can be made and waited on; no event ever arrives       */
/* ------------------------------------------------------------------ */

struct mock_event_set {
    unsigned int magic;
};
#define EVENT_SET_MAGIC 0x6e766d6cu

MOCK_API nvmlReturn_t nvmlEventSetCreate(struct mock_event_set **set)
{
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (set == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct mock_event_set *s = malloc(sizeof(*s));
    if (s == NULL)
        return NVML_ERROR_MEMORY;
    s->magic = EVENT_SET_MAGIC;
    *set = s;
    return NVML_SUCCESS;
}

MOCK_API nvmlReturn_t nvmlEventSetFree(struct mock_event_set *set)
{
    if (set == NULL || set->magic != EVENT_SET_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    set->magic = 0;
    free(set);
    return NVML_SUCCESS;
}

MOCK_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *eventTypes)
{
    return dev_ull(d, "supported_event_types", eventTypes);
}

MOCK_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long eventTypes,
                                               struct mock_event_set *set)
{
    unsigned long long supported = 0;
    CHECK(nvmlDeviceGetSupportedEventTypes(d, &supported));
    if (set == NULL || set->magic != EVENT_SET_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    return (eventTypes & ~supported) ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

/* Nothing happens on a simulated GPU: every wait times out at once. */
MOCK_API nvmlReturn_t nvmlEventSetWait_v2(struct mock_event_set *set, void *data, unsigned int timeoutms)
{
    (void)timeoutms;
    if (set == NULL || set->magic != EVENT_SET_MAGIC || data == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_ERROR_TIMEOUT;
}

MOCK_API nvmlReturn_t nvmlEventSetWait(struct mock_event_set *set, void *data, unsigned int timeoutms)
{
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

/* ------------------------------------------------------------------ */
/* Field values                                                       */
/* ------------------------------------------------------------------ */

/*
 * Field ids NVML documents (NVML_FI_DEV_*) that the mock derives from the
 * named profile values.  Power fields are scoped: scope 0 is the GPU, scope 1
 * the whole module, which the profiles leave unsupported (as on H200 SXM).
 */
struct field_source {
    unsigned int id;
    int gpu_scope_only;
    const char *field;
    const char *fallback;
};

static const struct field_source field_sources[] = {
    {1, 0, "ecc_mode.current", NULL},           /* ECC_CURRENT */
    {2, 0, "ecc_mode.pending", NULL},           /* ECC_PENDING */
    {82, 0, "temperature.memory", NULL},        /* MEMORY_TEMP */
    {83, 0, "power.total_energy_mj", NULL},     /* TOTAL_ENERGY_CONSUMPTION */
    {91, 0, "nvlink.count", NULL},              /* NVLINK_LINK_COUNT */
    {94, 0, "pcie.replay_counter", NULL},       /* PCIE_REPLAY_COUNTER */
    {95, 0, "pcie.replay_rollover_counter", NULL},
    {142, 0, "remapped_rows.correctable", NULL},
    {143, 0, "remapped_rows.uncorrectable", NULL},
    {144, 0, "remapped_rows.pending", NULL},
    {145, 0, "remapped_rows.failure", NULL},
    {185, 1, "power.average", "power.usage"},   /* POWER_AVERAGE (mW) */
    {186, 1, "power.instant", "power.usage"},   /* POWER_INSTANT */
    {187, 1, "power.min_limit", NULL},          /* POWER_MIN_LIMIT */
    {188, 1, "power.max_limit", NULL},          /* POWER_MAX_LIMIT */
    {189, 1, "power.default_limit", NULL},      /* POWER_DEFAULT_LIMIT */
    {190, 1, "power.limit", NULL},              /* POWER_CURRENT_LIMIT */
    {192, 1, "power.requested_limit", "power.limit"}, /* POWER_REQUESTED_LIMIT */
};

/* One field: an explicit "field.<id>.<scope>" / "field.<id>" key wins, then
 * the named value from field_sources, else NOT_SUPPORTED. */
static nvmlReturn_t field_value(nvmlDevice_t d, unsigned int id, unsigned int scope, unsigned long long *out)
{
    char field[MOCK_KEY_MAX];
    nvmlReturn_t ret;
    snprintf(field, sizeof(field), "field.%u.%u", id, scope);
    if ((ret = dev_ull(d, field, out)) != NVML_ERROR_NOT_SUPPORTED)
        return ret;
    snprintf(field, sizeof(field), "field.%u", id);
    if ((ret = dev_ull(d, field, out)) != NVML_ERROR_NOT_SUPPORTED)
        return ret;
    for (size_t i = 0; i < sizeof(field_sources) / sizeof(field_sources[0]); i++) {
        const struct field_source *src = &field_sources[i];
        if (src->id != id)
            continue;
        if (src->gpu_scope_only && scope != 0)
            return NVML_ERROR_NOT_SUPPORTED;
        ret = dev_ull(d, src->field, out);
        if (ret == NVML_ERROR_NOT_SUPPORTED && src->fallback != NULL)
            ret = dev_ull(d, src->fallback, out);
        return ret;
    }
    return NVML_ERROR_NOT_SUPPORTED;
}

/* Each value carries its own nvmlReturn; the call itself succeeds. */
MOCK_API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int valuesCount, nvmlFieldValue_t *values)
{
    CHECK(mock_check_device(d));
    if (values == NULL || valuesCount < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *v = &values[i];
        unsigned long long u = 0;
        v->timestamp = 0;
        v->latencyUsec = 0;
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        memset(&v->value, 0, sizeof(v->value));
        v->nvmlReturn = field_value(d, v->fieldId, v->scopeId, &u);
        v->value.ullVal = u;
        mock_trace("nvmlDeviceGetFieldValues: field %u scope %u -> %d", v->fieldId, v->scopeId, v->nvmlReturn);
    }
    return NVML_SUCCESS;
}
