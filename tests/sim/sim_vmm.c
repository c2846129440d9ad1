/*
 * sim_vmm.c: virtual memory management (cuMemCreate/hipMemCreate and friends) in the simulated
 * memory model. Three kinds of object, kept in plain arrays (a program holds a handful):
 *
 *   physical handle   size (a non-zero multiple of 2 MiB) on one device, charged to its capacity
 *                     from creation. Releasing it ends the owner's reference; the memory returns
 *                     to the capacity once it is released and none of its mappings remain, as in
 *                     the real driver.
 *   reservation       a range of the VMM address window (never charged), at the hint if that is
 *                     aligned and free, else at the next free aligned address. Freed only whole
 *                     (base and size exactly) and only with no mapping left inside.
 *   mapping           [va, va + size) of one reservation backed by [offset, offset + size) of one
 *                     handle; may not overlap another mapping. An unmap must cover one or more
 *                     whole, contiguous mappings exactly.
 *
 *       reservation  |-------------------------------- 64 MiB --------------------------------|
 *       mappings     |h1 2M|h2 2M|h5 2M|
 *
 * Addresses, sizes and offsets are multiples of the 2 MiB granularity; anything else, or a range
 * outside the rules, is SIM_INVALID; an unknown or released handle is SIM_INVALID_HANDLE.
 */
#include "sim_memory.h"

#include <string.h>

#define G SIM_VMM_GRANULARITY

static struct sim_handle *handle_find(struct sim_memory *m, uint64_t id)
{
    for (size_t i = 0; i < m->n_handles; i++)
        if (m->handles[i].id == id)
            return &m->handles[i];
    return NULL;
}

/* The physical memory goes back to its device; the handle is forgotten. */
static void handle_drop(struct sim_memory *m, struct sim_handle *h)
{
    m->dev[h->device].used -= h->size;
    *h = m->handles[--m->n_handles];
}

/* The reservation wholly containing [va, va + size), or NULL. */
static struct sim_reservation *reservation_holding(struct sim_memory *m, uintptr_t va,
                                                   size_t size)
{
    for (size_t i = 0; i < m->n_resv; i++) {
        struct sim_reservation *r = &m->resv[i];
        if (va >= r->base && va - r->base <= r->size && size <= r->size - (va - r->base))
            return r;
    }
    return NULL;
}

static struct sim_reservation *reservation_overlapping(struct sim_memory *m, uintptr_t base,
                                                       size_t size)
{
    for (size_t i = 0; i < m->n_resv; i++) {
        struct sim_reservation *r = &m->resv[i];
        if (base < r->base + r->size && r->base < base + size)
            return r;
    }
    return NULL;
}

static struct sim_mapping *mapping_holding(struct sim_memory *m, uintptr_t p)
{
    for (size_t i = 0; i < m->n_maps; i++)
        if (p >= m->maps[i].va && p - m->maps[i].va < m->maps[i].size)
            return &m->maps[i];
    return NULL;
}

/* Fits the window: [base, base + size) inside [vmm_base, vmm_end). */
static int in_window(struct sim_memory *m, uintptr_t base, size_t size)
{
    uintptr_t lo = m->layout->vmm_base, hi = m->layout->vmm_end;
    return base >= lo && base < hi && size <= hi - base;
}

static uintptr_t align_up(uintptr_t v, size_t to)
{
    return (v + to - 1) & ~(uintptr_t)(to - 1);
}

/* ---- physical handles ---------------------------------------------------------------------- */

enum sim_status sim_vmm_create(struct sim_memory *m, size_t size, int device, const void *prop,
                               size_t prop_size, uint64_t *out)
{
    *out = 0;
    if (size == 0 || size % G != 0)
        return SIM_INVALID;
    if (device < 0 || device >= m->devices)
        return SIM_INVALID_DEVICE;
    pthread_mutex_lock(&m->lock);
    enum sim_status s = sim_charge_locked(m, device, size);
    if (s == SIM_OK && sim_grow_array((void **)&m->handles, &m->handles_cap, m->n_handles,
                                      sizeof *m->handles) != 0)
        s = SIM_OUT_OF_MEMORY;
    if (s == SIM_OK) {
        /* Handles count up and are never reused: a released one stays unknown. */
        struct sim_handle *h = &m->handles[m->n_handles++];
        memset(h, 0, sizeof *h);
        h->id = m->layout->handle_base + ++m->handles_made * SIM_HANDLE_STEP;
        h->size = size;
        h->device = device;
        memcpy(h->prop, prop, prop_size < SIM_PROP_BYTES ? prop_size : SIM_PROP_BYTES);
        m->dev[device].used += size;
        *out = h->id;
    }
    pthread_mutex_unlock(&m->lock);
    return s;
}

enum sim_status sim_vmm_release(struct sim_memory *m, uint64_t id)
{
    enum sim_status s = SIM_INVALID_HANDLE;
    pthread_mutex_lock(&m->lock);
    struct sim_handle *h = handle_find(m, id);
    if (h && !h->released) {
        h->released = 1;
        if (h->mappings == 0)
            handle_drop(m, h);
        s = SIM_OK;
    }
    pthread_mutex_unlock(&m->lock);
    return s;
}

enum sim_status sim_vmm_properties(struct sim_memory *m, uint64_t id, void *prop,
                                   size_t prop_size)
{
    enum sim_status s = SIM_INVALID_HANDLE;
    pthread_mutex_lock(&m->lock);
    struct sim_handle *h = handle_find(m, id);
    if (h && !h->released) {
        memcpy(prop, h->prop, prop_size < SIM_PROP_BYTES ? prop_size : SIM_PROP_BYTES);
        s = SIM_OK;
    }
    pthread_mutex_unlock(&m->lock);
    return s;
}

/* ---- reservations -------------------------------------------------------------------------- */

enum sim_status sim_vmm_reserve(struct sim_memory *m, size_t size, size_t alignment,
                                uintptr_t hint, uintptr_t *out)
{
    *out = 0;
    if (size == 0 || size % G != 0 || (alignment & (alignment - 1)) != 0)
        return SIM_INVALID;
    size_t align = alignment > G ? alignment : G;
    enum sim_status s = SIM_OK;
    uintptr_t base = 0;

    pthread_mutex_lock(&m->lock);
    if (hint != 0 && hint % align == 0 && in_window(m, hint, size) &&
        !reservation_overlapping(m, hint, size)) {
        base = hint;
    } else {
        /* Bump, stepping over any reservation a hint placed ahead. Never reused. */
        uintptr_t cand = align_up(m->vmm_next, align);
        struct sim_reservation *r;
        while (in_window(m, cand, size) && (r = reservation_overlapping(m, cand, size)))
            cand = align_up(r->base + r->size, align);
        if (in_window(m, cand, size)) {
            base = cand;
            m->vmm_next = cand + size;
        } else {
            s = SIM_OUT_OF_MEMORY;
        }
    }
    if (s == SIM_OK &&
        sim_grow_array((void **)&m->resv, &m->resv_cap, m->n_resv, sizeof *m->resv) != 0)
        s = SIM_OUT_OF_MEMORY;
    if (s == SIM_OK) {
        m->resv[m->n_resv++] = (struct sim_reservation){base, size, 0};
        *out = base;
    }
    pthread_mutex_unlock(&m->lock);
    return s;
}

enum sim_status sim_vmm_free(struct sim_memory *m, uintptr_t base, size_t size)
{
    enum sim_status s = SIM_INVALID;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->n_resv; i++) {
        struct sim_reservation *r = &m->resv[i];
        if (r->base == base && r->size == size) {
            if (r->mappings == 0) {
                *r = m->resv[--m->n_resv];
                s = SIM_OK;
            }
            break;
        }
    }
    pthread_mutex_unlock(&m->lock);
    return s;
}

/* ---- mappings ------------------------------------------------------------------------------ */

enum sim_status sim_vmm_map(struct sim_memory *m, uintptr_t va, size_t size, size_t offset,
                            uint64_t id)
{
    if (size == 0 || va % G != 0 || size % G != 0 || offset % G != 0)
        return SIM_INVALID;
    enum sim_status s = SIM_OK;
    pthread_mutex_lock(&m->lock);
    struct sim_handle *h = handle_find(m, id);
    struct sim_reservation *r = reservation_holding(m, va, size);
    if (!h || h->released) {
        s = SIM_INVALID_HANDLE;
    } else if (offset > h->size || size > h->size - offset || !r) {
        s = SIM_INVALID;
    } else {
        for (size_t i = 0; i < m->n_maps && s == SIM_OK; i++)
            if (va < m->maps[i].va + m->maps[i].size && m->maps[i].va < va + size)
                s = SIM_INVALID;
    }
    if (s == SIM_OK &&
        sim_grow_array((void **)&m->maps, &m->maps_cap, m->n_maps, sizeof *m->maps) != 0)
        s = SIM_OUT_OF_MEMORY;
    if (s == SIM_OK) {
        m->maps[m->n_maps++] = (struct sim_mapping){va, size, id};
        h->mappings++;
        r->mappings++;
    }
    pthread_mutex_unlock(&m->lock);
    return s;
}

enum sim_status sim_vmm_unmap(struct sim_memory *m, uintptr_t va, size_t size)
{
    if (size == 0 || va % G != 0 || size % G != 0 || va > UINTPTR_MAX - size)
        return SIM_INVALID;
    enum sim_status s = SIM_OK;
    pthread_mutex_lock(&m->lock);
    /* Check first: whole mappings, back to back, exactly covering the range. */
    for (uintptr_t cur = va; cur != va + size && s == SIM_OK;) {
        struct sim_mapping *mp = mapping_holding(m, cur);
        if (!mp || mp->va != cur || mp->size > va + size - cur)
            s = SIM_INVALID;
        else
            cur += mp->size;
    }
    for (size_t i = 0; s == SIM_OK && i < m->n_maps;) {
        struct sim_mapping mp = m->maps[i];
        if (mp.va < va || mp.va >= va + size) {
            i++;
            continue;
        }
        m->maps[i] = m->maps[--m->n_maps];
        struct sim_reservation *r = reservation_holding(m, mp.va, mp.size);
        if (r)
            r->mappings--;
        struct sim_handle *h = handle_find(m, mp.handle);
        if (h && --h->mappings == 0 && h->released)
            handle_drop(m, h);
    }
    pthread_mutex_unlock(&m->lock);
    return s;
}

enum sim_status sim_vmm_check_mapped(struct sim_memory *m, uintptr_t va, size_t size)
{
    if (size == 0 || va > UINTPTR_MAX - size)
        return SIM_INVALID;
    enum sim_status s = SIM_OK;
    pthread_mutex_lock(&m->lock);
    for (uintptr_t cur = va; cur < va + size && s == SIM_OK;) {
        struct sim_mapping *mp = mapping_holding(m, cur);
        if (!mp)
            s = SIM_INVALID;
        else
            cur = mp->va + mp->size;
    }
    pthread_mutex_unlock(&m->lock);
    return s;
}

int sim_vmm_lookup_locked(struct sim_memory *m, uintptr_t p, struct sim_pointer *out)
{
    struct sim_mapping *mp = mapping_holding(m, p);
    if (!mp)
        return 0;
    struct sim_handle *h = handle_find(m, mp->handle);
    *out = (struct sim_pointer){SIM_VMM, h ? h->device : -1, mp->va, mp->size};
    return 1;
}
