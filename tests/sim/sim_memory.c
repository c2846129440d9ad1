/*
 * sim_memory.c: the device memory model of the simulated CUDA driver and HIP runtime (see
 * sim_memory.h for what it holds): configuration, contexts, fake device addresses, real host
 * memory, frees, streams, pools, registered host ranges and pointer queries. The VMM part is in
 * sim_vmm.c.
 *
 * Every public function takes the model's mutex; helpers ending in _locked expect it held.
 */
#define _POSIX_C_SOURCE 200809L /* posix_memalign */

#include "sim_memory.h"
#include "sim_env.h"

#include <stdlib.h>
#include <string.h>

/* ---- configuration ------------------------------------------------------------------------- */

int sim_memory_configure(struct sim_memory *m)
{
    const struct sim_layout *l = m->layout;
    unsigned long long capacity = 0, devices = 0, host_capacity = 0, context = 0;
    int bad = 0;
    bad |= sim_env_number(l->tag, l->capacity_env, l->default_capacity, 0, SIM_DEVICE_WINDOW,
                          l->consequence, &capacity);
    bad |= sim_env_number(l->tag, l->devices_env, 1, 1, SIM_MAX_DEVICES, l->consequence,
                          &devices);
    bad |= sim_env_number(l->tag, l->host_capacity_env, l->default_host_capacity, 0, SIZE_MAX,
                          l->consequence, &host_capacity);
    if (l->context_env)
        bad |= sim_env_number(l->tag, l->context_env, 0, 0, SIM_DEVICE_WINDOW, l->consequence,
                              &context);
    if (bad)
        return -1;
    m->capacity = (size_t)capacity;
    m->devices = (int)devices;
    m->host_capacity = (size_t)host_capacity;
    m->context_bytes = (size_t)context;
    for (int d = 0; d < m->devices; d++) {
        m->dev[d].window.next = l->device_base + (uintptr_t)d * SIM_DEVICE_WINDOW;
        m->dev[d].window.end = m->dev[d].window.next + SIM_DEVICE_WINDOW;
    }
    m->legacy.next = l->legacy_base;
    m->legacy.end = l->legacy_end;
    m->vmm_next = l->vmm_base;
    m->ok = 1;
    return 0;
}

/* ---- helpers ------------------------------------------------------------------------------- */

/* Rounds n up to a multiple of `to` (a power of two); -1 if that overflows. */
static int round_up(size_t n, size_t to, size_t *out)
{
    if (n > SIZE_MAX - (to - 1))
        return -1;
    *out = (n + to - 1) & ~(to - 1);
    return 0;
}

int sim_grow_array(void **array, size_t *cap, size_t len, size_t elem)
{
    if (len < *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 16;
    void *p = realloc(*array, n * elem);
    if (!p)
        return -1;
    *array = p;
    *cap = n;
    return 0;
}

static enum sim_status context_create_locked(struct sim_memory *m, int device)
{
    struct sim_device *d = &m->dev[device];
    if (d->has_context)
        return SIM_OK;
    if (m->context_bytes > m->capacity - d->used)
        return SIM_OUT_OF_MEMORY;
    d->used += m->context_bytes;
    d->has_context = 1;
    return SIM_OK;
}

/* Creates the device's context if needed, then checks that `bytes` more fit (charges nothing). */
enum sim_status sim_charge_locked(struct sim_memory *m, int device, size_t bytes)
{
    enum sim_status s = context_create_locked(m, device);
    if (s != SIM_OK)
        return s;
    return bytes > m->capacity - m->dev[device].used ? SIM_OUT_OF_MEMORY : SIM_OK;
}

/* The window a fake device address belongs to. */
static struct sim_window *window_of(struct sim_memory *m, uintptr_t addr, int device)
{
    if (addr >= m->layout->legacy_base && addr < m->layout->legacy_end)
        return &m->legacy;
    return &m->dev[device].window;
}

/* ---- contexts ------------------------------------------------------------------------------ */

enum sim_status sim_context_create(struct sim_memory *m, int device)
{
    pthread_mutex_lock(&m->lock);
    enum sim_status s = context_create_locked(m, device);
    pthread_mutex_unlock(&m->lock);
    return s;
}

int sim_context_exists(struct sim_memory *m, int device)
{
    pthread_mutex_lock(&m->lock);
    int exists = m->dev[device].has_context;
    pthread_mutex_unlock(&m->lock);
    return exists;
}

/* ---- allocation ---------------------------------------------------------------------------- */

enum sim_status sim_device_alloc(struct sim_memory *m, int device, size_t size, int legacy,
                                 uintptr_t *out)
{
    size_t rounded;
    *out = 0;
    if (round_up(size, SIM_ROUNDING, &rounded) != 0)
        return SIM_OUT_OF_MEMORY;
    if (legacy && m->layout->legacy_end == 0)
        return SIM_INVALID;

    pthread_mutex_lock(&m->lock);
    struct sim_window *w = legacy ? &m->legacy : &m->dev[device].window;
    enum sim_status s = sim_charge_locked(m, device, rounded);
    uintptr_t addr = 0;
    if (s == SIM_OK) {
        addr = sim_free_pop(&w->free, rounded);
        int fresh = addr == 0;
        /* Sizes are never coalesced, so churn through many distinct sizes can exhaust the
         * window before the capacity: that is fragmentation, reported as out of memory. */
        if (fresh && rounded > w->end - w->next)
            s = SIM_OUT_OF_MEMORY;
        else if (fresh)
            addr = w->next;
        if (s == SIM_OK) {
            struct sim_block b = {addr, rounded, SIM_DEVICE, device};
            if (sim_live_insert(&m->live, b) != 0) {
                s = SIM_OUT_OF_MEMORY;
                if (!fresh)
                    (void)sim_free_push(&w->free, rounded, addr); /* had room a moment ago */
            } else {
                if (fresh)
                    w->next += rounded;
                m->dev[device].used += rounded;
            }
        }
    }
    pthread_mutex_unlock(&m->lock);
    if (s == SIM_OK)
        *out = addr;
    return s;
}

enum sim_status sim_host_alloc(struct sim_memory *m, int kind, int device, size_t size,
                               void **out)
{
    size_t rounded;
    *out = NULL;
    if (round_up(size, SIM_ROUNDING, &rounded) != 0)
        return SIM_OUT_OF_MEMORY;
    void *mem = NULL;

    pthread_mutex_lock(&m->lock);
    enum sim_status s;
    if (kind == SIM_MANAGED)
        s = sim_charge_locked(m, device, rounded);
    else
        s = rounded > m->host_capacity - m->host_used ? SIM_OUT_OF_MEMORY : SIM_OK;
    if (s == SIM_OK && posix_memalign(&mem, SIM_HOST_ALIGN, rounded) != 0) {
        mem = NULL;
        s = SIM_OUT_OF_MEMORY;
    }
    if (s == SIM_OK) {
        struct sim_block b = {(uintptr_t)mem, rounded, kind, device};
        if (sim_live_insert(&m->live, b) != 0) {
            free(mem);
            mem = NULL;
            s = SIM_OUT_OF_MEMORY;
        } else if (kind == SIM_MANAGED) {
            m->dev[device].used += rounded;
        } else {
            m->host_used += rounded;
        }
    }
    pthread_mutex_unlock(&m->lock);
    *out = mem;
    return s;
}

enum sim_status sim_free(struct sim_memory *m, uintptr_t p, unsigned kinds)
{
    if (p == 0)
        return SIM_OK;
    pthread_mutex_lock(&m->lock);
    struct sim_block *slot = sim_live_find(&m->live, p);
    if (!slot || !(kinds & SIM_FREES(slot->kind))) {
        pthread_mutex_unlock(&m->lock);
        return SIM_INVALID;
    }
    struct sim_block b = *slot;
    sim_live_remove(&m->live, slot);
    if (b.kind == SIM_DEVICE) {
        m->dev[b.device].used -= b.size;
        /* On failure the fake address is just never handed out again. */
        (void)sim_free_push(&window_of(m, b.ptr, b.device)->free, b.size, b.ptr);
    } else if (b.kind == SIM_MANAGED) {
        m->dev[b.device].used -= b.size;
        free((void *)b.ptr);
    } else {
        m->host_used -= b.size;
        free((void *)b.ptr);
    }
    pthread_mutex_unlock(&m->lock);
    return SIM_OK;
}

/* ---- queries ------------------------------------------------------------------------------- */

void sim_mem_info(struct sim_memory *m, int device, size_t *free_bytes, size_t *total_bytes)
{
    pthread_mutex_lock(&m->lock);
    size_t used = m->dev[device].used;
    pthread_mutex_unlock(&m->lock);
    if (free_bytes)
        *free_bytes = m->capacity - used;
    if (total_bytes)
        *total_bytes = m->capacity;
}

size_t sim_device_used(struct sim_memory *m, int device)
{
    pthread_mutex_lock(&m->lock);
    size_t used = m->dev[device].has_context ? m->dev[device].used : 0;
    pthread_mutex_unlock(&m->lock);
    return used;
}

enum sim_status sim_pointer_query(struct sim_memory *m, uintptr_t p, struct sim_pointer *out)
{
    enum sim_status s = SIM_INVALID;
    pthread_mutex_lock(&m->lock);
    struct sim_block *slot = sim_live_find(&m->live, p);
    if (slot) {
        *out = (struct sim_pointer){slot->kind, slot->device, slot->ptr, slot->size};
        s = SIM_OK;
    } else if (sim_vmm_lookup_locked(m, p, out)) {
        s = SIM_OK;
    } else {
        for (size_t i = 0; i < m->n_regs; i++) {
            struct sim_registration *r = &m->regs[i];
            if (p >= r->base && p - r->base < r->size) {
                *out = (struct sim_pointer){SIM_REGISTERED_HOST, r->device, r->base, r->size};
                s = SIM_OK;
                break;
            }
        }
    }
    pthread_mutex_unlock(&m->lock);
    return s;
}

/* ---- streams and pools --------------------------------------------------------------------- */

enum sim_status sim_stream_create(struct sim_memory *m, uintptr_t *out)
{
    enum sim_status s = SIM_OK;
    pthread_mutex_lock(&m->lock);
    if (sim_grow_array((void **)&m->streams, &m->streams_cap, m->n_streams, sizeof *m->streams))
        s = SIM_OUT_OF_MEMORY;
    if (s == SIM_OK) {
        /* Handles count up and are never reused, so a destroyed one stays invalid. */
        uintptr_t h = m->layout->stream_base + ++m->streams_made * SIM_STREAM_STEP;
        m->streams[m->n_streams++] = h;
        *out = h;
    }
    pthread_mutex_unlock(&m->lock);
    return s;
}

enum sim_status sim_stream_destroy(struct sim_memory *m, uintptr_t stream)
{
    enum sim_status s = SIM_INVALID_HANDLE;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->n_streams; i++) {
        if (m->streams[i] == stream) {
            m->streams[i] = m->streams[--m->n_streams];
            s = SIM_OK;
            break;
        }
    }
    pthread_mutex_unlock(&m->lock);
    return s;
}

int sim_stream_live(struct sim_memory *m, uintptr_t stream)
{
    int live = 0;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->n_streams && !live; i++)
        live = m->streams[i] == stream;
    pthread_mutex_unlock(&m->lock);
    return live;
}

uintptr_t sim_pool_of(struct sim_memory *m, int device)
{
    return m->layout->pool_base + (uintptr_t)device;
}

int sim_pool_device(struct sim_memory *m, uintptr_t pool)
{
    uintptr_t base = m->layout->pool_base;
    if (pool < base || pool >= base + (uintptr_t)m->devices)
        return -1;
    return (int)(pool - base);
}

/* ---- registered host memory ---------------------------------------------------------------- */

enum sim_status sim_host_register(struct sim_memory *m, uintptr_t p, size_t size, int device)
{
    if (size == 0 || p > UINTPTR_MAX - size)
        return SIM_INVALID;
    enum sim_status s = SIM_OK;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->n_regs && s == SIM_OK; i++) {
        struct sim_registration *r = &m->regs[i];
        if (p < r->base + r->size && r->base < p + size)
            s = SIM_ALREADY_REGISTERED;
    }
    if (s == SIM_OK &&
        sim_grow_array((void **)&m->regs, &m->regs_cap, m->n_regs, sizeof *m->regs) != 0)
        s = SIM_OUT_OF_MEMORY;
    if (s == SIM_OK)
        m->regs[m->n_regs++] = (struct sim_registration){p, size, device};
    pthread_mutex_unlock(&m->lock);
    return s;
}

enum sim_status sim_host_unregister(struct sim_memory *m, uintptr_t p)
{
    enum sim_status s = SIM_NOT_REGISTERED;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->n_regs; i++) {
        if (m->regs[i].base == p) {
            m->regs[i] = m->regs[--m->n_regs];
            s = SIM_OK;
            break;
        }
    }
    pthread_mutex_unlock(&m->lock);
    return s;
}
