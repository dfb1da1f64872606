/* The one table that maps each way an ensure can fail to the errno the
 * calling program sees and the reason its event carries (SPEC section 5).
 * The README prints the same table. */
#pragma once

struct errtable_row {
	int err;	    /* positive errno */
	const char *cause;  /* what it means, for humans */
	const char *reason; /* event reason */
};

extern const struct errtable_row errtable[];
extern const unsigned errtable_len;

/* Event reason for a failed ensure that returned err (a negative errno):
 * the row's reason, "Failed" for errnos outside the table. */
const char *errtable_reason(int err);

/* Folds a negative errno into the table: values outside it become -EIO. */
int errtable_normalize(int err);
