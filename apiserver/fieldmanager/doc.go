// Package fieldmanager is kplane's server-side apply and field ownership.
package fieldmanager
