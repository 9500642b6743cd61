/* The log bins' counting in C (engine/measure/log_bins.py): what LogHistogram.add_many and
 * RollingDigest.add_many do per value, a value at a time, in Python. Every streamed token's
 * ITL and chunk gap is counted into three or four histograms (live windows, the step, the
 * run): at 75,000 tokens/s the Python loops were ~7 % of the client's CPU per token
 * (benchmarks/client_cost.py, a py-spy profile).
 *
 * The bin of a value is the Python one exactly: 0 at or below `vmin` (HIST_MIN_S), else
 * (Py_ssize_t)((log(v) - log_min) / log_ratio) + 1, the last bin past the top (and for a value
 * that is not a number). C's log() is the one math.log calls; the cast truncates toward zero as
 * int() does, and the quotient is positive above vmin. Built with the package where a C compiler
 * is (setup.py, optional); without it the Python loops run (log_bins.py `count_bins = None`). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>

static Py_ssize_t bin_of(double v, double vmin, double log_min, double log_ratio, Py_ssize_t nbins) {
    if (v <= vmin)
        return 0;
    double x = (log(v) - log_min) / log_ratio;
    if (!(x < (double)(nbins - 1)))  /* past the top, inf or nan: the last bin */
        return nbins - 1;
    Py_ssize_t i = (Py_ssize_t)x + 1;
    return i < nbins ? i : nbins - 1;
}

/* The values as C doubles: a list or tuple of floats (ints too), or anything with a buffer of
 * doubles (array('d')). Returns a new PyMem buffer (free it) and its length, or NULL with an error. */
static double *as_doubles(PyObject *values, Py_ssize_t *n) {
    if (PyList_Check(values) || PyTuple_Check(values)) {
        Py_ssize_t len = PySequence_Fast_GET_SIZE(values);
        PyObject **items = PySequence_Fast_ITEMS(values);
        double *out = PyMem_Malloc((len ? len : 1) * sizeof(double));
        if (out == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        for (Py_ssize_t i = 0; i < len; i++) {
            double v = PyFloat_Check(items[i]) ? PyFloat_AS_DOUBLE(items[i]) : PyFloat_AsDouble(items[i]);
            if (v == -1.0 && PyErr_Occurred()) {
                PyMem_Free(out);
                return NULL;
            }
            out[i] = v;
        }
        *n = len;
        return out;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(values, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (view.format == NULL || strcmp(view.format, "d") != 0 || view.itemsize != sizeof(double)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "count_bins: values must be a list, a tuple or an array of doubles");
        return NULL;
    }
    Py_ssize_t len = view.len / (Py_ssize_t)sizeof(double);
    double *out = PyMem_Malloc((len ? len : 1) * sizeof(double));
    if (out == NULL) {
        PyBuffer_Release(&view);
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(out, view.buf, len * sizeof(double));
    PyBuffer_Release(&view);
    *n = len;
    return out;
}

static int parse_params(PyObject *const *args, Py_ssize_t first, double *vmin, double *log_min, double *log_ratio) {
    *vmin = PyFloat_AsDouble(args[first]);
    *log_min = PyFloat_AsDouble(args[first + 1]);
    *log_ratio = PyFloat_AsDouble(args[first + 2]);
    if (PyErr_Occurred())
        return -1;
    if (!(*log_ratio > 0.0)) {
        PyErr_SetString(PyExc_ValueError, "count_bins: log_ratio must be positive");
        return -1;
    }
    return 0;
}

/* count_bins(bins: list[int], values, vmin, log_min, log_ratio) -> None: bins[bin of v] += 1 for each v */
static PyObject *py_count_bins(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "count_bins(bins, values, vmin, log_min, log_ratio)");
        return NULL;
    }
    PyObject *bins = args[0];
    if (!PyList_CheckExact(bins) || PyList_GET_SIZE(bins) < 1) {
        PyErr_SetString(PyExc_TypeError, "count_bins: bins must be a non-empty list of ints");
        return NULL;
    }
    double vmin, log_min, log_ratio;
    if (parse_params(args, 2, &vmin, &log_min, &log_ratio) < 0)
        return NULL;
    Py_ssize_t n;
    double *vals = as_doubles(args[1], &n);
    if (vals == NULL)
        return NULL;
    Py_ssize_t nbins = PyList_GET_SIZE(bins);
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t i = bin_of(vals[k], vmin, log_min, log_ratio, nbins);
        long long c = PyLong_AsLongLong(PyList_GET_ITEM(bins, i));
        if (c == -1 && PyErr_Occurred()) {
            PyMem_Free(vals);
            return NULL;
        }
        PyObject *nv = PyLong_FromLongLong(c + 1);
        if (nv == NULL) {
            PyMem_Free(vals);
            return NULL;
        }
        PyList_SetItem(bins, i, nv);  /* steals nv, drops the old count */
    }
    PyMem_Free(vals);
    Py_RETURN_NONE;
}

static int dict_add_one(PyObject *d, PyObject *key) {
    PyObject *old = PyDict_GetItemWithError(d, key);  /* borrowed */
    long long c = 0;
    if (old != NULL) {
        c = PyLong_AsLongLong(old);
        if (c == -1 && PyErr_Occurred())
            return -1;
    } else if (PyErr_Occurred()) {
        return -1;
    }
    PyObject *nv = PyLong_FromLongLong(c + 1);
    if (nv == NULL)
        return -1;
    int rc = PyDict_SetItem(d, key, nv);
    Py_DECREF(nv);
    return rc;
}

/* count_bins_dicts(a: dict, b: dict, values, vmin, log_min, log_ratio, nbins) -> None:
 * a[bin] += 1 and b[bin] += 1 for each value (sparse bins: RollingDigest's second and total) */
static PyObject *py_count_bins_dicts(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "count_bins_dicts(a, b, values, vmin, log_min, log_ratio, nbins)");
        return NULL;
    }
    PyObject *a = args[0], *b = args[1];
    if (!PyDict_Check(a) || !PyDict_Check(b)) {
        PyErr_SetString(PyExc_TypeError, "count_bins_dicts: a and b must be dicts");
        return NULL;
    }
    double vmin, log_min, log_ratio;
    if (parse_params(args, 3, &vmin, &log_min, &log_ratio) < 0)
        return NULL;
    Py_ssize_t nbins = PyLong_AsSsize_t(args[6]);
    if (nbins == -1 && PyErr_Occurred())
        return NULL;
    if (nbins < 1) {
        PyErr_SetString(PyExc_ValueError, "count_bins_dicts: nbins must be at least 1");
        return NULL;
    }
    Py_ssize_t n;
    double *vals = as_doubles(args[2], &n);
    if (vals == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *key = PyLong_FromSsize_t(bin_of(vals[k], vmin, log_min, log_ratio, nbins));
        if (key == NULL || dict_add_one(a, key) < 0 || dict_add_one(b, key) < 0) {
            Py_XDECREF(key);
            PyMem_Free(vals);
            return NULL;
        }
        Py_DECREF(key);
    }
    PyMem_Free(vals);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"count_bins", (PyCFunction)(void (*)(void))py_count_bins, METH_FASTCALL,
     "count_bins(bins, values, vmin, log_min, log_ratio) -> None: one more in each value's bin"},
    {"count_bins_dicts", (PyCFunction)(void (*)(void))py_count_bins_dicts, METH_FASTCALL,
     "count_bins_dicts(a, b, values, vmin, log_min, log_ratio, nbins) -> None: one more in each value's bin of a and of b"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_bins", "The log bins' counting in C (engine/measure/log_bins.py).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__bins(void) { return PyModule_Create(&module); }
