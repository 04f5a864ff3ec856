// Package image owns the test of Usher's OCI image, whose definition is
// the Containerfile beside it (docs/image.md): the built image, mounted
// with buildah, runs its usher under chroot as the image's user against
// PostgreSQL — version, migrate, serve until ready, a clean stop — and
// leaves nothing changed outside /data. Containers cannot be run where
// Usher is built and tested, so the test runs the image's files, not a
// container.
//
// The test runs when USHER_TEST_IMAGE names an image in buildah's local
// storage (`make image-test` builds one and sets it); it needs root.
package image
