# wave-quantisation probe: same head dim, grids of 2048 blocks (15.5 waves) vs 1980 (15 waves)
L=build/v_sp3/lib/libflashattn.so
for r in 1 2; do
python3 bench/peer_cuda.py --lib $L --pass bwd --causal 0 --hdims 256 --seqlens 4096 --batch 4 --heads 8 2>&1 | tail -3
python3 bench/peer_cuda.py --lib $L --pass bwd --causal 0 --hdims 256 --seqlens 3840 --batch 3 --heads 11 2>&1 | tail -3
python3 bench/peer_cuda.py --lib $L --pass bwd --causal 0 --hdims 128 --seqlens 4096 --batch 4 --heads 16 2>&1 | tail -3
python3 bench/peer_cuda.py --lib $L --pass bwd --causal 0 --hdims 128 --seqlens 3840 --batch 6 --heads 11 2>&1 | tail -3
python3 bench/peer_cuda.py --lib $L --pass bwd --causal 0 --hdims 64 --seqlens 4096 --batch 4 --heads 32 2>&1 | tail -3
python3 bench/peer_cuda.py --lib $L --pass bwd --causal 0 --hdims 64 --seqlens 3840 --batch 12 --heads 11 2>&1 | tail -3
done
