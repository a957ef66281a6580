/* mla.cl: (to be written) */
