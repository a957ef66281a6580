/* embedding.cl: (to be written) */
