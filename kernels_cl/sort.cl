/* sort.cl: (to be written) */
