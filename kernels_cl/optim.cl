/* optim.cl: (to be written) */
