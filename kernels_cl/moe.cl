/* moe.cl: (to be written) */
