/* conv.cl: (to be written) */
