# rlrun_library(NAME [SUBDIRS dir...] [EXCLUDE file...] DEPS ...) - the static library of one
# top-level folder.
# Sources are the folder's *.cc files (subfolders are added explicitly by the folder itself), so
# adding a file needs no edit here; CONFIGURE_DEPENDS re-globs on every build.
function(rlrun_library name)
  cmake_parse_arguments(ARG "" "" "DEPS;SUBDIRS;EXCLUDE" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  foreach(dir ${ARG_SUBDIRS})
    file(GLOB dir_srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${dir}/*.cc)
    list(APPEND srcs ${dir_srcs})
  endforeach()
  foreach(excluded ${ARG_EXCLUDE})
    list(REMOVE_ITEM srcs ${CMAKE_CURRENT_SOURCE_DIR}/${excluded})
  endforeach()
  if(srcs)
    add_library(${name} STATIC ${srcs})
    target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
    target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  else()  # a folder with no sources yet still takes part in the dependency graph
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE ${PROJECT_SOURCE_DIR})
    target_link_libraries(${name} INTERFACE ${ARG_DEPS})
  endif()
endfunction()

# rlrun_tests(component DEPS ... [LABELS stem=label ...]) - one GoogleTest binary per
# tests/<component>/**/*_test.cc (its sub-folders mirror the component's), labelled <component>
# for `ctest -L`; `LABELS foo_test=bar` adds the label bar to the tests of foo_test.cc (e.g.
# tests that need an external program). Test file stems are unique within a component.
# Tests run in parallel under ctest; a test that needs a resource alone sets RESOURCE_LOCK itself.
# Extra ctest properties for one binary's tests: set RLRUN_TEST_PROPERTIES_<stem> before the call,
# e.g. set(RLRUN_TEST_PROPERTIES_hf_checkpoint_test FIXTURES_REQUIRED hf_reference).
function(rlrun_tests component)
  cmake_parse_arguments(ARG "" "" "DEPS;LABELS" ${ARGN})
  file(GLOB_RECURSE test_srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*_test.cc)
  foreach(src ${test_srcs})
    get_filename_component(stem ${src} NAME_WE)
    set(target ${component}_${stem})
    add_executable(${target} ${src})
    target_link_libraries(${target} PRIVATE ${ARG_DEPS} GTest::gtest_main GTest::gmock)
    target_compile_definitions(${target} PRIVATE
        RLRUN_SOURCE_DIR="${PROJECT_SOURCE_DIR}" RLRUN_BINARY="$<TARGET_FILE:rlrun>")
    gtest_discover_tests(${target} DISCOVERY_TIMEOUT 60
        PROPERTIES LABELS ${component} ${RLRUN_TEST_PROPERTIES_${stem}})
    set(extra_labels "")
    foreach(entry ${ARG_LABELS})
      if(entry MATCHES "^${stem}=(.+)$")
        list(APPEND extra_labels ${CMAKE_MATCH_1})
      endif()
    endforeach()
    if(extra_labels)
      # gtest_discover_tests flattens list-valued PROPERTIES (CMake < 3.28), so all the labels
      # are set by a ctest include file that runs after the discovered-tests file, which
      # lists the binary's tests in ${target}_TESTS.
      set(labels_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_labels.cmake)
      file(WRITE ${labels_file}
           "foreach(t IN LISTS ${target}_TESTS)\n"
           "  set_tests_properties(\${t} PROPERTIES LABELS \"${component};${extra_labels}\")\n"
           "endforeach()\n")
      set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${labels_file})
    endif()
  endforeach()
endfunction()
