/* norm.cl: (to be written) */
